// DocumentStore
