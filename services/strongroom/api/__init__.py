"""Generated gRPC stubs and their package."""
