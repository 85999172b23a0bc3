// Package mcp is the agent's MCP server (`bridge mcp`): each op of each
// paired host's signed catalog is a tool whose input schema is derived from
// the op's typed arguments, and a call submits a signed request through the
// synced folder and returns the host's verified result. It is a client of
// the folder like `bridge run`, built on [agent.Client]; it never runs
// anything locally. docs/MCP.md describes the tools, their names and their
// errors.
//
// Entry points: [New], then [Server.Run] on a transport (stdio) or
// [Server.ServeHTTP] on a loopback address.
package mcp
