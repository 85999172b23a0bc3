// Package opspec is what the host's signed catalog says of an op and its
// arguments ([OpInfo], [ArgInfo]), and the rules a value must keep to be
// taken ([OpInfo.CheckArgs], [Rule.Check]): the part of the policy both
// sides use. The host's policy compiler (package policy) builds the
// descriptions and checks every request by the same rules, with what only
// the host knows besides (where a path leads on its disk); the agent checks
// a call against the catalog before it sends. Neither side needs the
// other's code for it: the agent does not link the policy compiler.
package opspec
