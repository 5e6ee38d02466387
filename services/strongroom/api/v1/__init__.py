"""Generated gRPC stubs. Do not edit: run `make protos`."""
