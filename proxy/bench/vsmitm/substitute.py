"""mitmproxy addon for the vsmitm bench: the credential substitution the
CodeForge proxy does, done the plain mitmproxy way.

- request headers: the token name becomes the secret value;
- response body: the secret value becomes the token name (the body is
  buffered whole: stream_large_bodies is left unset, mitmproxy's default,
  so the addon sees the full content);
- upstream connections: only cf_host is allowed and it is pinned to
  127.0.0.1 (the analogue of the CodeForge proxy's Resolver), so nothing
  is ever resolved through DNS or sent off the machine. The SNI and the
  certificate check still use the name.

Options (set by vsmitm with --set): cf_host, cf_token, cf_secret.
"""

from mitmproxy import ctx


class Substitute:
    def __init__(self):
        self.token = b""
        self.secret = b""

    def load(self, loader):
        loader.add_option("cf_host", str, "", "API host name, pinned to 127.0.0.1")
        loader.add_option("cf_token", str, "", "credential token name")
        loader.add_option("cf_secret", str, "", "credential secret value")

    def configure(self, updated):
        self.token = ctx.options.cf_token.encode()
        self.secret = ctx.options.cf_secret.encode()

    def server_connect(self, data):
        host, port = data.server.address
        if not ctx.options.cf_host or host != ctx.options.cf_host:
            data.server.error = f"vsmitm addon: only {ctx.options.cf_host!r} may be reached, not {host!r}"
            return
        if data.server.sni is None:
            data.server.sni = host
        data.server.address = ("127.0.0.1", port)

    def request(self, flow):
        if not self.token:
            return
        flow.request.headers.fields = tuple(
            (k, v.replace(self.token, self.secret))
            for k, v in flow.request.headers.fields
        )

    def response(self, flow):
        if not self.secret:
            return
        body = flow.response.content
        if body and self.secret in body:
            flow.response.content = body.replace(self.secret, self.token)


addons = [Substitute()]
