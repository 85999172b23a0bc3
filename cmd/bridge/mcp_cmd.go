package main

import (
	"fmt"
	"io"
	"net"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/mcp"
)

// McpCmd serves the agent's MCP server (docs/MCP.md): the hosts' ops as
// tools, on standard input and output or on a loopback HTTP address.
type McpCmd struct {
	HTTP           string        `name:"http" placeholder:"ADDR" help:"Serve MCP's streamable HTTP on this loopback address (e.g. 127.0.0.1:8765) instead of standard input and output."`
	Poll           time.Duration `default:"2s" help:"How often to read the hosts' catalogs again (a new catalog changes the tool list)."`
	Wait           time.Duration `default:"50s" help:"How long a tool call waits for its result when it does not say (_wait_seconds); then it returns the request id."`
	MaxWait        time.Duration `name:"max-wait" default:"10m" help:"The longest wait a call may ask for."`
	SyncthingFlags `embed:""`
}

func (c *McpCmd) Run(g *Globals) error {
	// Standard output carries the protocol: every word of ours goes to
	// standard error.
	log := bridge.NewLogger(g.stderr, "text", bridge.LogInfo)
	if c.HTTP != "" {
		if err := mcp.CheckLoopback(c.HTTP); err != nil {
			return &codeError{code: exitUsage, err: err}
		}
	}
	if c.Poll <= 0 || c.Wait <= 0 || c.MaxWait <= 0 {
		return &codeError{code: exitUsage, err: fmt.Errorf("--poll, --wait and --max-wait must be above 0")}
	}
	g.syncthing = &c.SyncthingFlags
	h, err := g.openHome() // sets h.Nudger: every call's writes are nudged
	if err != nil {
		return err
	}
	srv, err := mcp.New(h, mcp.Options{Poll: c.Poll, Wait: c.Wait, MaxWait: c.MaxWait, Version: version(), Logger: log})
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	if c.HTTP != "" {
		return srv.ServeHTTP(ctx, c.HTTP, func(a net.Addr) {
			log.Info("bridge mcp: serving streamable HTTP", "url", "http://"+a.String())
		})
	}
	err = srv.Run(ctx, &sdk.IOTransport{Reader: io.NopCloser(g.stdin), Writer: nopWriteCloser{g.stdout}})
	if ctx.Err() != nil {
		return nil // stopped by a signal
	}
	return err
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
