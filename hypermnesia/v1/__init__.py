"""Generated gRPC contracts (scripts/gen_protos.py); do not edit."""
