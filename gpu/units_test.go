package gpu

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxproxy/ctxproxy/modelinfo"
)

const (
	kib = 1 << 10
	mib = 1 << 20
	gb  = 1 << 30
)

// facts reads the model_info of a real model, as /api/show gives it, from
// modelinfo's test data.
func facts(t testing.TB, name string) modelinfo.Facts {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "modelinfo", "testdata", "model_info", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := modelinfo.ParseJSON(data)
	if err != nil {
		t.Fatalf("ParseJSON(%s): %v", name, err)
	}
	return f
}
