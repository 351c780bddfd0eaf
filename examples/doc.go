// Package examples holds tinyvmm's teaching material: the example programs
// in its subdirectories, and guide_test.go, which keeps GUIDE.md true by
// running every command in it and checking every file and function it
// cites.
package examples
