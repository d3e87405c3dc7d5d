"""A group's topology: which of its ranks share a host.

Learned when the group forms, from each rank's host identity (pycollect._C.host_identity:
boot id, IPC namespace and PYCOLLECT_HOST_TAG, the test the shared-memory upgrade makes,
so network-namespace hosts with a tag each are separate hosts). Hosts are numbered in the
order of their lowest rank; ranks are the group's global ranks.

    topo = pc.get_topology(group)
    topo.hosts           # ((0, 1), (2, 3)): the ranks of each host
    topo.host_of(2)      # 1
    topo.local_rank, topo.local_size, topo.num_hosts
    str(topo)            # "2 hosts x 2 ranks: [0, 1] [2, 3]"
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Sequence, Tuple

IDENTITY_CHARS = 95  # the engine compares this much of an identity (its Intro record's field)


@dataclass(frozen=True)
class Topology:
    hosts: Tuple[Tuple[int, ...], ...]  # global ranks of each host, hosts by their lowest rank
    rank: int                           # this process's global rank

    @classmethod
    def from_identities(cls, identities: Sequence[str], ranks: Sequence[int], rank: int) -> "Topology":
        """`identities[i]` is the host identity of global rank `ranks[i]`; an unknown one ("")
        shares a host with nobody."""
        by_host: Dict[str, list] = {}
        for i, (ident, r) in enumerate(zip(identities, ranks)):
            key = ident[:IDENTITY_CHARS] if ident else f"unknown-{i}"
            by_host.setdefault(key, []).append(int(r))
        hosts = sorted((tuple(sorted(rs)) for rs in by_host.values()), key=lambda h: h[0])
        return cls(tuple(hosts), int(rank))

    @property
    def num_hosts(self) -> int:
        return len(self.hosts)

    def host_of(self, rank: int) -> int:
        """The host index of global rank `rank`."""
        for h, ranks in enumerate(self.hosts):
            if rank in ranks:
                return h
        raise ValueError(f"rank {rank} is not in this group (ranks {sorted(r for h in self.hosts for r in h)})")

    @property
    def host(self) -> int:
        return self.host_of(self.rank)

    @property
    def local_ranks(self) -> Tuple[int, ...]:
        return self.hosts[self.host]

    @property
    def local_rank(self) -> int:
        return self.local_ranks.index(self.rank)

    @property
    def local_size(self) -> int:
        return len(self.local_ranks)

    @property
    def uniform(self) -> bool:
        """Every host has as many ranks as every other."""
        return len({len(h) for h in self.hosts}) == 1

    def __str__(self) -> str:
        sizes = sorted({len(h) for h in self.hosts})
        shape = (f"{self.num_hosts} host{'s' if self.num_hosts != 1 else ''} x {sizes[0]} rank"
                 f"{'s' if sizes[0] != 1 else ''}" if len(sizes) == 1
                 else f"{self.num_hosts} hosts of {'+'.join(str(len(h)) for h in self.hosts)} ranks")
        return f"{shape}: " + " ".join(f"[{', '.join(map(str, h))}]" for h in self.hosts)
