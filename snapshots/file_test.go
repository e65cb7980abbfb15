package snapshots

import "testing"

func TestFileStoreContract(t *testing.T) {
	testContract(t, func(t *testing.T) opener {
		dir := t.TempDir()
		return func(t *testing.T, cfg Config) Store { return newFileStore(t, dir, cfg) }
	})
}
