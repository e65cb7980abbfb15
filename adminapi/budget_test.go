package adminapi

import "testing"

// What is left of a window once each part has its share.
func TestBudgetSplitsTheWindow(t *testing.T) {
	b := Budget{Total: 100000}
	b.SystemPrompt, b.Tools, b.ResponseReserve = 2000, 5000, 4000
	if got, want := b.Available(), 89000; got != want {
		t.Errorf("Available() = %d, want %d", got, want)
	}
	if got, want := b.ConversationBudget(), 89000; got != want {
		t.Errorf("ConversationBudget() = %d, want %d", got, want)
	}
	b.Conversation = 9000
	if got, want := b.Available(), 80000; got != want {
		t.Errorf("Available() with a conversation = %d, want %d", got, want)
	}
	if got := (Budget{Total: 100, SystemPrompt: 500}).Available(); got != 0 {
		t.Errorf("overdrawn budget: Available() = %d, want 0", got)
	}
}
