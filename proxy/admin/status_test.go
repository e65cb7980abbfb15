package admin

import (
	"testing"
	"time"
)

func TestSeenModelsBounded(t *testing.T) {
	sm := newSeenModels()
	start := time.Now()
	for i := range maxSeenModels + 10 {
		sm.note(seenModel{name: "m" + string(rune('A'+i)), at: start.Add(time.Duration(i) * time.Second)})
	}
	list := sm.list()
	if len(list) != maxSeenModels || list[0].name != "m"+string(rune('A'+maxSeenModels+9)) {
		t.Errorf("%d models, newest %q", len(list), list[0].name)
	}
}
