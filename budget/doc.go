// Package budget counts tokens and knows model limits: tiktoken and
// approximate counters, a bounded cache of counts, per-model calibration
// from what the backend reports, the table of known context windows, the
// budget of a request and a running tracker.
package budget
