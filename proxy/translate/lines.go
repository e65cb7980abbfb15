package translate

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// LineConverter turns Ollama NDJSON lines into a client's stream: Stream,
// ResponsesStream and MessagesStream.
type LineConverter interface {
	Append(dst, line []byte) ([]byte, error)
	Finish(dst []byte) ([]byte, error)
}

// copyLines converts the NDJSON stream from r to w, writing and flushing
// the events of each line before reading the next, and returns Finish's
// result, or the first read or write error.
func copyLines(w io.Writer, r io.Reader, c LineConverter) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var buf, long []byte
	for {
		line, rerr := br.ReadSlice('\n')
		if errors.Is(rerr, bufio.ErrBufferFull) {
			// A line longer than the buffer: gather it whole.
			long = append(long[:0], line...)
			for errors.Is(rerr, bufio.ErrBufferFull) {
				line, rerr = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if len(line) > 0 {
			var err error
			if buf, err = c.Append(buf[:0], line); err != nil {
				var ferr error
				buf, ferr = c.Finish(buf[:0])
				_ = write(w, buf)
				return fmt.Errorf("%w: %w", ferr, err)
			}
			if err := write(w, buf); err != nil {
				return err
			}
		}
		if rerr != nil {
			buf, err := c.Finish(buf[:0])
			if werr := write(w, buf); werr != nil {
				return werr
			}
			if rerr != io.EOF && err == ErrIncomplete {
				return fmt.Errorf("%w: reading: %w", err, rerr)
			}
			return err
		}
	}
}
