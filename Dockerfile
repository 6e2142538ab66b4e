# syntax=docker/dockerfile:1
# Multi-stage build. The Rust stages run the same cargo commands as CI:
#   cargo build --release --locked -p vfps-server -p vfps-chaos
# Targets:
#   runtime      the vfps service (non-root, no shell, ports 8080 8081 8082)
#   stress-test  vfps-chaos, the load generator of the Kubernetes chaos Job

FROM docker.io/library/rust:1-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock clippy.toml ./
COPY proto proto
COPY crates crates
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p vfps-server -p vfps-chaos \
    && mkdir -p /out \
    && cp target/release/vfps target/release/vfps-chaos /out/

FROM gcr.io/distroless/cc-debian12:nonroot AS runtime
COPY --from=build /out/vfps /usr/local/bin/vfps
# The embedded SQLite default needs a writable directory; Kubernetes mounts one.
WORKDIR /var/lib/vfps
ENV VFPS_SQLITE_PATH=/var/lib/vfps/vfps.sqlite
EXPOSE 8080 8081 8082
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/vfps"]
CMD ["serve"]

FROM gcr.io/distroless/cc-debian12:nonroot AS stress-test
COPY --from=build /out/vfps-chaos /usr/local/bin/vfps-chaos
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/vfps-chaos"]
CMD ["load"]
