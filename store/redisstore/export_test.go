package redisstore

// KeyPrefixOf is the key prefix of the shard that holds id: what the
// package's tests build raw key names with, whatever the number of shards.
func (s *Store) KeyPrefixOf(id string) string { return s.on(id).prefix }
