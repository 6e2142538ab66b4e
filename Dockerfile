# syntax=docker/dockerfile:1
# Multi-stage build. The Rust stages run the same cargo commands as CI:
#   cargo build --release --locked -p vfps-server -p vfps-chaos
# Targets:
#   runtime      the vfps service (non-root, no shell, ports 8080 8081 8082)
#   stress-test  vfps-chaos, the load generator of the Kubernetes chaos Job

# Base images by digest (the tag is for people and the dependency bot): a rebuild
# fetches the bytes that were reviewed.
FROM docker.io/library/rust:1-slim-bookworm@sha256:94e9efa4033213dbb70d4f665527e7ece3944ddb7ba1dd2e43f6fd6e2490af58 AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock clippy.toml ./
COPY proto proto
COPY crates crates
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p vfps-server -p vfps-chaos \
    && mkdir -p /out/data \
    && cp target/release/vfps target/release/vfps-chaos /out/

FROM gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f AS runtime
ARG VERSION=dev
LABEL org.opencontainers.image.title="vfps" \
      org.opencontainers.image.description="A pseudonymization service, wire-compatible with vfps" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/vfps /usr/local/bin/vfps
# The embedded SQLite default needs a directory the server's user may write
# (Kubernetes mounts a volume there; `docker run` without one gets this one).
COPY --from=build --chown=65532:65532 /out/data /var/lib/vfps
ENV VFPS_SQLITE_PATH=/var/lib/vfps/vfps.sqlite
# Upstream's image reads appsettings.json and appsettings.<environment>.json
# from its working directory, /opt/vfps; so does vfps, from the same place.
WORKDIR /opt/vfps
EXPOSE 8080 8081 8082
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/vfps"]
CMD ["serve"]

FROM gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f AS stress-test
ARG VERSION=dev
LABEL org.opencontainers.image.title="vfps-chaos" \
      org.opencontainers.image.description="The vfps resilience harness: load generator and checkers" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/vfps-chaos /usr/local/bin/vfps-chaos
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/vfps-chaos"]
CMD ["load"]
