package budget

// Budget divides a context window among the parts of a prompt (the
// X-Ctxproxy-Budget header shows one).
type Budget struct {
	// Total is the window being divided (usually Limits.MaxTokens).
	Total int
	// SystemPrompt, Tools and ResponseReserve are allocated first.
	SystemPrompt    int
	Tools           int
	ResponseReserve int
	// Conversation is what the messages use now.
	Conversation int
}

// ConversationBudget returns what the conversation may use: the total less
// the system prompt, the tools and the response reserve
// (100000 − 2000 − 5000 − 4000 = 89000). Never negative.
func (b Budget) ConversationBudget() int {
	return max(0, b.Total-b.SystemPrompt-b.Tools-b.ResponseReserve)
}

// Available returns what is still free: the conversation budget less what
// the conversation uses. Never negative.
func (b Budget) Available() int {
	return max(0, b.ConversationBudget()-b.Conversation)
}
