package engine

// Waiting is how many claims long-poll on e, for tests that need one to
// wait before they go on.
func (e *Engine) Waiting() int {
	e.waiting.mu.Lock()
	defer e.waiting.mu.Unlock()
	return len(e.waiting.list)
}
