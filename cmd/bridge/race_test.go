//go:build race

package main

// raceBuild: this test binary has the race detector, which changes what
// allocation counts mean (TestCostBudget).
const raceBuild = true
