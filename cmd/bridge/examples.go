package main

// Examples in --help of the commands people start with (and in the manual
// page, which is made from the same help).

const runExamples = `Examples:

  bridge run test                            an op without arguments
  bridge run echo msg=hello                  NAME=VALUE arguments, as bridge ops shows them
  bridge run apply-patch --stdin=fix.patch   send a file as the op's standard input
  bridge run --key build-42 build            a retry with the same key never runs twice
  bridge --json run test | jq .exit_code     for a script`

func (c *SubmitCmd) Help() string {
	return `Prints the request id at once; the op runs while you do something else.

Examples:

  id=$(bridge submit test)                   then: bridge wait $id
  bridge submit --ttl 1h deploy env=staging  expires unless it started within an hour
  bridge --json submit test                  {"id", "host", "op"}`
}

func (c *WaitCmd) Help() string {
	return `Examples:

  bridge wait 3f2a9c1e                       the id, or its first 8 digits or more
  bridge wait --timeout 30m $id              exit 75 if it is still not done then
  bridge logs -f $id                         to see the output while it runs instead`
}

func (c *OpsCmd) Help() string {
	return `Examples:

  bridge ops                                 every op, with a ready command line
  bridge ops --host laptop                   one host's ops only
  bridge --json ops                          the signed catalog as data`
}

func (c *GuideCmd) Help() string {
	return `Examples:

  bridge guide                               Markdown for an agent to read
  bridge guide --format agents-md --out AGENTS.md   keep a section of AGENTS.md current
  bridge guide --skill .claude/skills/syncbridge    a Claude Code skill`
}

func (c *McpCmd) Help() string {
	return `Examples:

  bridge mcp                                 MCP over standard input and output
  bridge mcp --http 127.0.0.1:8765           streamable HTTP on loopback
  claude mcp add bridge -- bridge mcp        register it with Claude Code`
}

func (c *ServeCmd) Help() string {
	return `Examples:

  bridge serve                               in the foreground; Ctrl-C drains and stops
  bridge serve --log-format json -v          logs for a collector
  bridge service install                     run it as a user service instead
  bridge policy check && bridge serve        check the policy first`
}

func (c *PairCmd) Help() string {
	return `Examples:

  bridge pair                                shows the fingerprint and asks for the other side's
  bridge pair --fingerprint abcd-efgh-ijkl-mnop-qrst-uvwx   no prompt: for scripts
  bridge pair --name cloud-1 --peer 5f3c...  name the peer (the policy's [agents.cloud-1])`
}

func (c *ApproveCmd) Help() string {
	return `Examples:

  bridge pending                             what waits, and what it would run
  bridge approve cloud-1/3f2a9c1e            the agent's name and the request id (or its first 8 digits)
  bridge deny cloud-1/3f2a9c1e --reason "not on a Friday"`
}
