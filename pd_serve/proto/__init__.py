"""pd-serve's gRPC wire format: `pd_serve.proto`, its generated stubs (regenerate with
scripts/gen_proto.sh) and `convert` (proto messages <-> the serving core's records)."""
