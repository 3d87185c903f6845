# idemproxy in a container (docs/deploy.md). Build: docker build -t idemproxy .
# Run:   docker run -d -p 8080:8080 -v idemproxy-data:/var/lib/idemproxy idemproxy
# Reload the policies: docker kill --signal=HUP CONTAINER; stop: docker stop (SIGTERM).

# The build stage runs the release build CI runs (.ci/run; tests/operators/deploy.rs checks
# that they agree).
FROM rust:1-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked

FROM debian:bookworm-slim
# A dedicated user without a shell; the ledger's folder is its own, mode 0700.
RUN useradd --system --uid 10001 --home-dir /var/lib/idemproxy --shell /usr/sbin/nologin idemproxy \
    && install -d -o idemproxy -g idemproxy -m 0700 /var/lib/idemproxy
COPY --from=build /src/target/release/idemproxy /usr/local/bin/idemproxy
COPY deploy/container.toml /etc/idemproxy/proxy.toml
COPY policies /etc/idemproxy/policies
USER idemproxy
# The ledger (with the files it keeps beside itself) and the installation secret: back this
# volume up.
VOLUME /var/lib/idemproxy
# Agents connect to 8080. The admin API (9901) listens on the container's loopback only;
# to publish it, set admin_listen = "0.0.0.0:9901" and IDEMPROXY_ADMIN_TOKEN (docs/deploy.md).
EXPOSE 8080
# GET /healthz of the admin API: 200 while the ledger can write. The slim image has no HTTP
# client; bash's /dev/tcp speaks the one request.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9901 && printf 'GET /healthz HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["idemproxy"]
CMD ["serve", "-c", "/etc/idemproxy/proxy.toml"]
