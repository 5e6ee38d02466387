"""Transport security: who a process is (`identity`), the certificates that say so (`certs`, a
local certificate authority for `strongroom up` and the tests) and the TLS settings every
channel, server and link of the process uses (`tls`)."""
