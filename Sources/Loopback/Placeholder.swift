// Loopback
