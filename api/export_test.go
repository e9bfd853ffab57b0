package api

// SetOnBodyRead makes s call f with a request body's running total after
// each read of it, so a test knows what the relay has received without
// waiting.
func SetOnBodyRead(s *Server, f func(int64)) { s.onBodyRead = f }
