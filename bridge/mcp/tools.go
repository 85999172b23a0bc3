package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
)

// The tools that take a request from its id on, and the inbox. Their names
// start with "bridge_"; an op of that name is offered as host__op.

var idSchema = &jsonschema.Schema{Type: "string", Pattern: "^[0-9a-f]{32}$",
	Description: "The request_id an op tool returned."}

func objectSchema(props map[string]*jsonschema.Schema, required ...string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "object", Properties: props, Required: required,
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}}}
}

// idTool is a bridge_* tool about one request.
type idTool struct {
	name, desc string
	readOnly   bool
	outcome    bool               // it answers with an Outcome (outcomeSchema)
	output     *jsonschema.Schema // else, what it answers with
	extra      map[string]*jsonschema.Schema
	run        func(ctx context.Context, req *sdk.CallToolRequest, cl *agent.Client, id string, in map[string]any) *sdk.CallToolResult
}

func (s *Server) addBridgeTools() {
	wait := waitSchema(waits{s.opts.Wait, s.opts.MaxWait}, "Then status pending again, with the output so far.")
	tools := []idTool{
		{name: "bridge_status", readOnly: true, output: typedObject(map[string]string{"id": "string", "op": "string", "host": "string",
			"state": "string", "reason": "string", "exit_code": "integer", "created": "string", "expires": "string", "acked": "boolean", "error": "string", "hint": "string"}),
			desc: "The state of a request sent earlier: submitted, awaiting-approval, or its result's status with reason and exit code. Reads only.",
			run: func(_ context.Context, _ *sdk.CallToolRequest, cl *agent.Client, id string, _ map[string]any) *sdk.CallToolResult {
				st, err := cl.Status(id)
				if err != nil {
					return errorResult(err, "")
				}
				return jsonResult(st)
			}},
		{name: "bridge_wait", readOnly: true, outcome: true, extra: map[string]*jsonschema.Schema{inWait: wait},
			desc: "Wait for the result of a request sent earlier and return it as the op's tool would (with progress notifications of its output). Returns status pending again if the wait ends first.",
			run: func(ctx context.Context, req *sdk.CallToolRequest, cl *agent.Client, id string, in map[string]any) *sdk.CallToolResult {
				var d *time.Duration
				if n, ok := in[inWait].(float64); ok {
					w := time.Duration(min(n, 1e6) * float64(time.Second))
					d = &w
				}
				return s.await(ctx, req, cl, id, d)
			}},
		{name: "bridge_result", readOnly: true, outcome: true,
			desc: "The result of a request sent earlier if it is in already (no waiting); status pending if not.",
			run: func(_ context.Context, _ *sdk.CallToolRequest, cl *agent.Client, id string, _ map[string]any) *sdk.CallToolResult {
				out, err := cl.Result(id)
				if errors.Is(err, agent.ErrNoResult) || (err == nil && cl.RerunOrdered(out)) {
					return pendingResult(cl, id, 0)
				} else if err != nil {
					return errorResult(err, "")
				}
				cl.Ack(out)
				return outcomeResult(cl, out, s.needsApproval(out))
			}},
		{name: "bridge_cancel", output: typedObject(map[string]string{"request_id": "string", "cancel": "string", "note": "string", "error": "string", "hint": "string"}),
			desc: "Ask the host to cancel a request: it does not run, or is stopped if it runs (its result then says cancelled). An op stopped while running may have had part of its effect.",
			run: func(_ context.Context, _ *sdk.CallToolRequest, cl *agent.Client, id string, _ map[string]any) *sdk.CallToolResult {
				if _, err := cl.Result(id); err == nil {
					return jsonResult(map[string]string{"request_id": id, "cancel": "answered", "note": "it has its answer already: bridge_result shows it"})
				}
				if err := cl.Cancel(id); err != nil {
					return errorResult(err, "")
				}
				return jsonResult(map[string]string{"request_id": id, "cancel": "sent", "note": "the host stops it when the cancel arrives; bridge_wait returns its final result"})
			}},
		{name: "bridge_logs", readOnly: true, output: typedObject(map[string]string{"request_id": "string", "stdout": "string", "stderr": "string",
			"next_from": "integer", "error": "string", "hint": "string"}),
			extra: map[string]*jsonschema.Schema{"from": {Type: "integer", Minimum: ptr(1.0), Description: "The first chunk to return (1, or the next_from of an earlier call)."}},
			desc:  "The output a running op has streamed so far (verified chunks), and next_from to continue from. The result, when it comes, holds all of it.",
			run: func(_ context.Context, _ *sdk.CallToolRequest, cl *agent.Client, id string, in map[string]any) *sdk.CallToolResult {
				from := 1
				if n, ok := in["from"].(float64); ok && n >= 1 && n < 1e9 {
					from = int(n)
				}
				prev := ""
				if from > 1 {
					// The chain is checked from its start: read up to from.
					chunks, err := cl.Progress(id, 1, "")
					if err != nil {
						return errorResult(err, "")
					}
					if len(chunks) < from-1 {
						return jsonResult(map[string]any{"request_id": id, "stdout": "", "stderr": "", "next_from": from})
					}
					prev = chunks[from-2].ChunkHash()
				}
				chunks, err := cl.Progress(id, from, prev)
				if err != nil {
					return errorResult(err, "")
				}
				var stdout, stderr strings.Builder
				next := from
				for _, ch := range chunks {
					stdout.Write(ch.Stdout)
					stderr.Write(ch.Stderr)
					next = ch.Seq + 1
				}
				return jsonResult(map[string]any{"request_id": id, "stdout": stdout.String(), "stderr": stderr.String(), "next_from": next})
			}},
	}
	for _, t := range tools {
		props := map[string]*jsonschema.Schema{"request_id": idSchema}
		for k, v := range t.extra {
			props[k] = v
		}
		schema := objectSchema(props, "request_id")
		resolved, err := schema.Resolve(nil)
		if err != nil {
			panic(fmt.Sprintf("bridge mcp: internal error: %s schema: %v", t.name, err))
		}
		tool := &sdk.Tool{Name: t.name, Description: t.desc, InputSchema: schema,
			Annotations: &sdk.ToolAnnotations{ReadOnlyHint: t.readOnly, IdempotentHint: t.readOnly, OpenWorldHint: ptr(false)}}
		switch {
		case t.outcome:
			tool.OutputSchema = outcomeSchema
		case t.output != nil:
			tool.OutputSchema = t.output
		}
		s.srv.AddTool(tool,
			func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				in, err := checkInput(req.Params.Arguments, resolved)
				if err != nil {
					return toolError(fmt.Sprintf("bad arguments for %s: %v", t.name, err), "give the request_id an op tool returned (32 hex digits)"), nil
				}
				cl, err := s.client()
				if err != nil {
					return errorResult(err, ""), nil
				}
				defer cl.Close()
				return t.run(ctx, req, cl, in["request_id"].(string), in), nil
			})
	}

	inbox := objectSchema(map[string]*jsonschema.Schema{
		"all": {Type: "boolean", Description: "Also show the messages shown before."},
	})
	inboxResolved, err := inbox.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("bridge mcp: internal error: inbox schema: %v", err))
	}
	s.srv.AddTool(&sdk.Tool{Name: "bridge_inbox", InputSchema: inbox,
		OutputSchema: typedObject(map[string]string{"messages": "array", "error": "string", "hint": "string"}),
		Description:  "The host's messages to this agent (from its human) and notices (started, stopping, approval-pending, approved, policy-changed, key-rotated, rerun-ordered...), verified: each with host_name, created, new, answered (a notice about a request answered already) and note (kind, event, request, text). New ones are marked seen and acked.",
		Annotations:  &sdk.ToolAnnotations{OpenWorldHint: ptr(false)}},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			in, err := checkInput(req.Params.Arguments, inboxResolved)
			if err != nil {
				return toolError(fmt.Sprintf("bad arguments for bridge_inbox: %v", err), ""), nil
			}
			cl, err := s.client()
			if err != nil {
				return errorResult(err, ""), nil
			}
			defer cl.Close()
			items, err := cl.Inbox()
			if err != nil {
				return errorResult(err, ""), nil
			}
			all, _ := in["all"].(bool)
			show := []agent.InboxItem{}
			var fresh []agent.InboxItem
			for _, it := range items {
				if all || it.New {
					show = append(show, it)
				}
				if it.New {
					fresh = append(fresh, it)
				}
			}
			if err := cl.MarkSeen(fresh, true); err != nil {
				s.opts.Logger.Warn("mark inbox seen", "err", err)
			}
			return jsonResult(map[string]any{"messages": show}), nil
		})
}

// checkInput decodes a bridge_* tool's arguments and checks them against
// its schema.
func checkInput(raw json.RawMessage, schema *jsonschema.Resolved) (map[string]any, error) {
	in := map[string]any{}
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &in); err != nil {
			return nil, fmt.Errorf("arguments are not a JSON object: %w", err)
		}
	}
	if err := schema.Validate(in); err != nil {
		return nil, err
	}
	if id, ok := in["request_id"].(string); ok && !bridge.ValidID(id) {
		return nil, fmt.Errorf("%q is not a request id", id)
	}
	return in, nil
}

// typedObject is an output schema of an object's property types only (the
// tool's description says what they mean). An integer that may be null
// (exit_code before the op ran) is said so.
func typedObject(props map[string]string) *jsonschema.Schema {
	out := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{}}
	for name, typ := range props {
		if typ == "integer" {
			out.Properties[name] = &jsonschema.Schema{Types: []string{"integer", "null"}}
			continue
		}
		out.Properties[name] = &jsonschema.Schema{Type: typ}
	}
	return out
}
