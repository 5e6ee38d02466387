"""The router of a cluster (`strongroom-router`): forwards the messages of routed stores to the
neighbouring clusters that want them and stores what neighbours forward (docs/routing.md).

Modules: `topology` (neighbour graph and forwarding trees, from the realm), `interest` (interest
records and their merge), `forwarder` (route durables and the Forward streams out), `receiver`
(what neighbours forward, published here), `router` (the active router: election, interest
exchange, routes, status), `transport` (the router-to-router calls), `servicer` and `server`
(RouterService), `main` (the process).
"""
