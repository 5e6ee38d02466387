"""The realm service: the realm definition, validated, versioned and stored in etcd."""
