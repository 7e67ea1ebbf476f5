"""The broker's network layer: client connections (framing, ordered pipelining, back-pressure),
the listeners and their security, SASL on the server side, and who sent the request being
handled."""
