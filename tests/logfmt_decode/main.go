// tests/logfmt_decode: the log tests' logfmt parser. Reads logfmt records
// on stdin with go-logfmt (the reference decoder, Debian's
// golang-github-go-logfmt-logfmt-dev) and prints each record as one line of
// JSON: an array of [key, value] pairs in their order, repeats kept.
// Exits 1 naming the line on the first record go-logfmt refuses (an
// unterminated quote, an invalid escape, a bad key).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/go-logfmt/logfmt"
)

func main() {
	dec := logfmt.NewDecoder(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for dec.ScanRecord() {
		pairs := [][2]string{}
		for dec.ScanKeyval() {
			pairs = append(pairs, [2]string{string(dec.Key()), string(dec.Value())})
		}
		if err := dec.Err(); err != nil {
			break
		}
		line, err := json.Marshal(pairs)
		if err != nil {
			fmt.Fprintln(os.Stderr, "logfmt_decode:", err)
			os.Exit(1)
		}
		out.Write(append(line, '\n'))
	}
	if err := dec.Err(); err != nil {
		out.Flush()
		fmt.Fprintln(os.Stderr, "logfmt_decode:", err)
		os.Exit(1)
	}
}
