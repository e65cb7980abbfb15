package budget

// Budget divides a context window among the parts of a prompt (the
// X-Ctxproxy-Budget header shows one).
type Budget struct {
	// Total is the window being divided (usually Window.MaxTokens).
	Total int
	// SystemPrompt, Tools, Template and ResponseReserve are allocated
	// first. Template is what the chat template adds that belongs to no
	// message and no tool (the reply's priming, the calibrated
	// per-request offset): a request without tools has Tools 0.
	SystemPrompt    int
	Tools           int
	Template        int
	ResponseReserve int
	// Conversation is what the messages use now.
	Conversation int
}

// ConversationBudget returns what the conversation may use: the total less
// the system prompt, the tools, the template's own tokens and the response
// reserve (100000 − 2000 − 5000 − 0 − 4000 = 89000). Never negative.
func (b Budget) ConversationBudget() int {
	return max(0, b.Total-b.SystemPrompt-b.Tools-b.Template-b.ResponseReserve)
}

// Available returns what is still free: the conversation budget less what
// the conversation uses. Never negative.
func (b Budget) Available() int {
	return max(0, b.ConversationBudget()-b.Conversation)
}
