// EventLog
