# syntax=docker/dockerfile:1
# The daemonset-canary controller image: a static-ish Rust binary on distroless, non-root.
#   docker build -t ghcr.io/daemonset-canary/daemonset-canary:v0.1.0 .
# The manifests in deploy/manager expect it to run as UID 65532 with a read-only root filesystem.

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# --locked: build exactly the dependency versions of Cargo.lock. The image runs the controller:
# built without the embedded simulator (`demo`, `sim serve`), in the `dist` profile (whole-program
# LTO), for a smaller executable and less resident memory (docs/benchmarks.md).
RUN cargo build --profile dist --locked --package daemonset-canary --no-default-features \
 && cp target/dist/daemonset-canary /daemonset-canary

# distroless/cc: glibc and libgcc for a Rust binary, no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /daemonset-canary /usr/local/bin/daemonset-canary
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/daemonset-canary"]
CMD ["run"]
