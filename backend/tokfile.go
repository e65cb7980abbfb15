package backend

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/ctxproxy/ctxproxy/budget/exact"
)

// The file the tokenizer directory keeps per model digest: what builds
// the model's tokenizer, laid out to be read by slicing one buffer.
//
//	"ctxvocab" version(uvarint)
//	json:   length(uvarint) bytes    the Show without its vocabulary's arrays
//	tokens: strings                  tokenizer.ggml.tokens
//	types:  count(uvarint) varints   tokenizer.ggml.token_type
//	scores: count(uvarint) float32s  tokenizer.ggml.scores, little-endian; 0 without
//	merges: strings                  tokenizer.ggml.merges; 0 without
//	crc:    CRC-32C of everything before, 4 bytes little-endian
//
// strings are a count (uvarint), the length of their bytes (uvarint),
// their bytes one after another, then each one's length (uvarint): read
// as one string and the count cut from it.
const (
	vocabMagic   = "ctxvocab"
	vocabVersion = 1
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// errVocabFile: a file that is not a whole vocabulary file of this
// version.
var errVocabFile = errors.New("not a whole tokenizer file")

// encodeVocabFile lays out show (split: its arrays in Vocab) as the file.
func encodeVocabFile(show exact.Show) ([]byte, error) {
	show = show.Split()
	js, err := json.Marshal(show)
	if err != nil {
		return nil, err
	}
	v := show.Vocab
	b := make([]byte, 0, len(js)+vocabSize(v)+64)
	b = append(b, vocabMagic...)
	b = binary.AppendUvarint(b, vocabVersion)
	b = binary.AppendUvarint(b, uint64(len(js)))
	b = append(b, js...)
	b = appendStrings(b, v.Tokens)
	b = binary.AppendUvarint(b, uint64(len(v.Types)))
	for _, t := range v.Types {
		b = binary.AppendVarint(b, int64(t))
	}
	b = binary.AppendUvarint(b, uint64(len(v.Scores)))
	for _, f := range v.Scores {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	b = appendStrings(b, v.Merges)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable)), nil
}

// vocabSize is about the bytes v takes in the file.
func vocabSize(v *exact.Vocab) int {
	n := 2*len(v.Types) + 4*len(v.Scores) + 2*len(v.Merges)
	for _, ss := range [][]string{v.Tokens, v.Merges} {
		for _, s := range ss {
			n += len(s) + 1
		}
	}
	return n
}

func appendStrings(b []byte, ss []string) []byte {
	size := 0
	for _, s := range ss {
		size += len(s)
	}
	b = binary.AppendUvarint(b, uint64(len(ss)))
	b = binary.AppendUvarint(b, uint64(size))
	for _, s := range ss {
		b = append(b, s...)
	}
	for _, s := range ss {
		b = binary.AppendUvarint(b, uint64(len(s)))
	}
	return b
}

// decodeVocabFile reads the file in data: the Show it holds, its Vocab
// set. The tokens and merges are shares of one string each.
func decodeVocabFile(data []byte) (exact.Show, error) {
	var show exact.Show
	if len(data) < len(vocabMagic)+4 || string(data[:len(vocabMagic)]) != vocabMagic {
		return show, fmt.Errorf("%w: no %q header", errVocabFile, vocabMagic)
	}
	body := data[:len(data)-4]
	if crc32.Checksum(body, crcTable) != binary.LittleEndian.Uint32(data[len(body):]) {
		return show, fmt.Errorf("%w: its checksum does not match (cut short or damaged)", errVocabFile)
	}
	r := fileReader{b: body[len(vocabMagic):]}
	if v := r.uvarint(); r.err == nil && v != vocabVersion {
		return show, fmt.Errorf("%w: version %d, this ctxproxy reads %d", errVocabFile, v, vocabVersion)
	}
	js := r.bytes(r.uvarint())
	v := &exact.Vocab{Tokens: r.strings()}
	if n := r.count(1); n > 0 {
		v.Types = make([]int32, n)
		for i := range v.Types {
			v.Types[i] = r.int32()
		}
	}
	if n := r.count(4); n > 0 {
		raw := r.bytes(uint64(4 * n))
		v.Scores = make([]float32, n)
		for i := range v.Scores {
			v.Scores[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	}
	v.Merges = r.strings()
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%w: %d bytes past its end", errVocabFile, len(r.b))
	}
	if r.err != nil {
		return show, r.err
	}
	if err := json.Unmarshal(js, &show); err != nil {
		return show, fmt.Errorf("%w: %w", errVocabFile, err)
	}
	show.Vocab = v
	return show, nil
}

// fileReader reads a vocabulary file's fields from b; the first error
// stays, and every read after it returns zeros.
type fileReader struct {
	b   []byte
	err error
}

func (r *fileReader) fail() {
	if r.err == nil {
		r.err = fmt.Errorf("%w: cut short", errVocabFile)
	}
	r.b = nil
}

func (r *fileReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *fileReader) int32() int32 {
	v, n := binary.Varint(r.b)
	if n <= 0 || v != int64(int32(v)) {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return int32(v)
}

// count reads a count of items of at least size bytes each, no more than
// the bytes left hold.
func (r *fileReader) count(size int) int {
	n := r.uvarint()
	if n > uint64(len(r.b)/size) {
		r.fail()
		return 0
	}
	return int(n)
}

func (r *fileReader) bytes(n uint64) []byte {
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

// strings reads strings (see the layout above); nil for none.
func (r *fileReader) strings() []string {
	n := r.uvarint()
	blob := string(r.bytes(r.uvarint()))
	if n > uint64(len(r.b)) {
		r.fail()
	}
	if r.err != nil || n == 0 {
		return nil
	}
	out := make([]string, n)
	off := uint64(0)
	for i := range out {
		l := r.uvarint()
		if l > uint64(len(blob))-off {
			r.fail()
			return nil
		}
		out[i] = blob[off : off+l]
		off += l
	}
	if off != uint64(len(blob)) {
		r.fail()
	}
	if r.err != nil {
		return nil
	}
	return out
}
