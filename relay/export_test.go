package relay

// ForgetClockMeasurement makes the fence's last measurement too old for
// RecentClock, as if 10 s had passed.
func (s *Service) ForgetClockMeasurement() {
	s.clock.mu.Lock()
	defer s.clock.mu.Unlock()
	s.clock.measured = s.clock.measured.Add(-clockFresh)
}
