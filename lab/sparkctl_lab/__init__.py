"""sparkctl-lab: the rehearsal cluster of sparkctl in local containers.

Four simulated Sparks and a switch (podman containers with systemd, veth cables,
shaped bridges) and the stand-ins for what needs a GPU, RDMA or a real switch
(``sparkctl_lab.standins``). It plugs ``sparkctl lab`` into the ``sparkctl``
command through the ``sparkctl.commands`` entry point (:mod:`sparkctl_lab.cli`)
and depends on sparkctl itself; sparkctl never imports it.
"""

from __future__ import annotations

__version__ = "0.2.0"
