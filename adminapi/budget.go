package adminapi

// Budget is how a request's window (Total: num_ctx or the model's) is
// divided. The proxy plans each request with one, the X-Ctxproxy-Budget
// header shows it, session records store the last one, and the admin API
// reports it (BudgetReport), all in this one shape.
type Budget struct {
	// Total is the window being divided (usually Window.MaxTokens).
	Total int `json:"total"`
	// SystemPrompt, Tools, Template and ResponseReserve are allocated
	// first. Template is what the chat template adds that belongs to no
	// message and no tool (the reply's priming, the calibrated
	// per-request offset): a request without tools has Tools 0.
	SystemPrompt    int `json:"system"`
	Tools           int `json:"tools"`
	Template        int `json:"template"`
	ResponseReserve int `json:"reserve"`
	// Conversation is what the messages use, as forwarded.
	Conversation int `json:"conversation"`
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
