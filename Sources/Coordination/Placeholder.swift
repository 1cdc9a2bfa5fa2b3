// Coordination
