"""Generated gRPC stubs for msgstore.v1 (make proto); do not edit."""
