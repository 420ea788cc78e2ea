"""Sparse (torch.sparse_coo) allreduce, as gloo does it: every rank's indices and values are
allgathered and the sum is the coalesced concatenation. Ranks may hold different numbers of
non-zeros, so the exchange has two steps: a small allgather of each rank's shape and nnz
(waited for in the caller, so that every rank posts the data exchange at the same point of
its call sequence), then one non-blocking allgather of a byte block per rank, sized for the
largest nnz, holding the rank's indices then its values. The result replaces the input
tensor (copy_), and the Work's value is [that tensor], which DDP reads for sparse gradients.
"""

import math

import torch

_INDEX_DTYPE = torch.int64
_INDEX_BYTES = 8


def _metadata(tensor):
    """[nnz, dim, sparse_dim, *shape] as int64: what every rank must agree on, and its nnz."""
    return torch.tensor([tensor._nnz(), tensor.dim(), tensor.sparse_dim(), *tensor.shape],
                        dtype=torch.int64)


def _check_metadata(gathered, mine):
    """Every rank's shape and sparse_dim must be this rank's; returns the nnz of each rank."""
    for rank, row in enumerate(gathered.tolist()):
        if row[1:] != mine[1:]:
            raise ValueError(
                f"chorus: sparse allreduce needs the same shape and sparse_dim on every rank: "
                f"rank {rank} has shape {tuple(row[3:])} and sparse_dim {row[2]}, this rank "
                f"{tuple(mine[3:])} and {mine[2]}")
    return [row[0] for row in gathered.tolist()]


def _as_bytes(tensor):
    return tensor.contiguous().reshape(-1).view(torch.uint8)


class SparseAllreduce:
    """The two steps of one sparse allreduce on a ProcessGroupChorus."""

    def __init__(self, pg, tensor):
        self.pg = pg
        self.tensor = tensor
        values = tensor._values()
        self.sparse_dim = tensor.sparse_dim()
        self.dense_shape = tuple(values.shape[1:])
        self.values_dtype = values.dtype
        self.value_row_bytes = math.prod(self.dense_shape) * values.element_size()
        self.row_bytes = self.sparse_dim * _INDEX_BYTES + self.value_row_bytes

    def exchange_counts(self):
        """Step 1, blocking: the nnz of every rank, after checking that the shapes agree."""
        mine = _metadata(self.tensor)
        gathered = torch.empty((self.pg.size(), mine.numel()), dtype=torch.int64)
        self.pg._allgather_flat(gathered, mine, "sparse allreduce (counts)").wait()
        return _check_metadata(gathered, mine.tolist())

    def post(self, counts):
        """Step 2: posts the allgather of every rank's indices and values; returns its Work."""
        block = max(1, max(counts) * self.row_bytes)  # a zero-count exchange still posts
        mine = torch.zeros(block, dtype=torch.uint8)
        index_bytes = _as_bytes(self.tensor._indices().to(_INDEX_DTYPE))
        value_bytes = _as_bytes(self.tensor._values())
        mine[:index_bytes.numel()] = index_bytes
        mine[index_bytes.numel():index_bytes.numel() + value_bytes.numel()] = value_bytes
        gathered = torch.empty(self.pg.size() * block, dtype=torch.uint8)

        def finish():
            return [self._sum(gathered.view(self.pg.size(), block), counts)]

        return self.pg._allgather_flat(gathered, mine, "sparse allreduce", finish)

    def _sum(self, blocks, counts):
        indices, values = [], []
        for block, nnz in zip(blocks, counts):
            index_bytes = self.sparse_dim * nnz * _INDEX_BYTES
            value_bytes = nnz * self.value_row_bytes
            # clone(): a block may start at any byte, a wider dtype's view needs alignment
            indices.append(block[:index_bytes].clone().view(_INDEX_DTYPE)
                           .view(self.sparse_dim, nnz))
            values.append(block[index_bytes:index_bytes + value_bytes].clone()
                          .view(self.values_dtype).view(nnz, *self.dense_shape))
        total = torch.sparse_coo_tensor(torch.cat(indices, dim=1), torch.cat(values),
                                        self.tensor.shape).coalesce()
        self.tensor.copy_(total)
        return self.tensor


def sparse_allreduce(pg, tensor, op_name):
    """A Work for the in-place sum of the sparse COO `tensor` over the group."""
    if op_name != "sum":
        raise ValueError(f"chorus: sparse allreduce supports only SUM, not {op_name}")
    step = SparseAllreduce(pg, tensor)
    return step.post(step.exchange_counts())
