"""The warm start's batch order: rows of similar lengths batched together, the batches shuffled.

Why not transformers' ``LengthGroupedSampler`` (``train_sampling_strategy="group_by_length"``)? It
cuts a random permutation into mega-batches of 50 batches and sorts each mega-batch by length,
longest first, so the batches of one mega-batch come in order of decreasing length. The shortest
rows of a role are one kind of example -- the empty answers of the write role (chatter, questions:
nothing to store) -- so they arrived as a run of 4-5 batches at the end of every 50 steps and never
in between; a run of 100 steps ended on four of them, at a learning rate near zero. Here the batches
are built the same way (same padding) and then put in a random order, so every kind of row turns up
all through training and no run ends on one kind.

Measured (write role, default data, 100 steps of 8, learning rate 1.5e-3, 2 threads, 2026-11-27):
with transformers' order the loss sat at 0.02-0.5 and jumped to 3.2 at step 49 and to 5.5-5.8 at
steps 97-100 (the model wrote a triplet where nothing was to be stored); in this order the jumps
came at steps 32, 42, 55, 74, 77 (8.8, 5.1, 2.4, 3.3, 2.5) and the last step's loss was 0.08.
Held-out (100 generated test rows): exact-triplet F1 0.605 (transformers' order) and 0.586 (this
one), a difference inside the noise of 100 rows; of all 48 empty-gold test rows, 2 and 3 outputs were
empty. So the order removes the artefact, not the failure: learning to store nothing needs more than
seeing those rows at the right time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler


def length_batches(lengths: Sequence[int], batch_size: int, *, seed: int, epoch: int = 0,
                   mega_batches: int = 50) -> list[list[int]]:
    """Batches of row indices: similar lengths in each batch, the batches in a seeded random order.

    A random permutation is cut into mega-batches of ``mega_batches * batch_size`` rows, each sorted
    by length and cut into batches (as transformers' ``LengthGroupedSampler`` does); then the order
    of the batches is shuffled. The batch that holds the longest row comes first (an out-of-memory
    error shows at the first step, not hours in); a short last batch stays last, so a DataLoader
    with the same ``batch_size`` cuts the flattened order back into these batches.

    A last mega-batch of fewer than ``batch_size`` rows joins the one before it (when there is one):
    alone it would be the short batch, and it could hold the longest row, which then could not come
    first without a short batch coming first too. Whenever ``batch_size`` divides the number of rows
    this never happens and the batches are those of the plain construction.

    >>> b = length_batches([5, 1, 9, 3, 7, 2, 8], 2, seed=0)
    >>> sorted(i for batch in b for i in batch), max(b[0], key=[5, 1, 9, 3, 7, 2, 8].__getitem__)
    ([0, 1, 2, 3, 4, 5, 6], 2)
    """
    if batch_size < 1 or mega_batches < 1:
        raise ValueError(f"batch_size and mega_batches must be >= 1, got {batch_size}, {mega_batches}")
    n = len(lengths)
    if n == 0:
        return []
    g = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
    perm = torch.randperm(n, generator=g).tolist()
    size = mega_batches * batch_size
    starts = list(range(0, n, size))
    if len(starts) > 1 and n - starts[-1] < batch_size:
        starts.pop()  # a last mega-batch shorter than one batch joins the one before: see above
    ends = starts[1:] + [n]
    ordered = [i for a, b in zip(starts, ends) for i in sorted(perm[a:b], key=lambda i: -lengths[i])]
    batches = [ordered[k:k + batch_size] for k in range(0, n, batch_size)]
    tail = [batches.pop()] if len(batches[-1]) < batch_size and len(batches) > 1 else []
    first = max(range(len(batches)), key=lambda j: max(lengths[i] for i in batches[j]))
    head = batches.pop(first)
    order = torch.randperm(len(batches), generator=g).tolist()
    return [head] + [batches[j] for j in order] + tail


class ShuffledLengthSampler(Sampler):
    """A ``torch.utils.data.Sampler`` over :func:`length_batches`, flattened: a DataLoader with the
    same ``batch_size`` cuts it back into those batches. ``set_epoch`` (called by the trainer) gives
    each epoch its own order; the order depends only on ``(seed, epoch)``, so a resumed run skips
    exactly the batches it had trained on."""

    def __init__(self, lengths: Sequence[int], batch_size: int, *, seed: int):
        self.lengths = [int(n) for n in lengths]
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        for batch in length_batches(self.lengths, self.batch_size, seed=self.seed, epoch=self.epoch):
            yield from batch


class SortedLengthSampler(ShuffledLengthSampler):
    """transformers' own ``LengthGroupedSampler`` order (``batching="sorted_length"``: mega-batches of 50
    batches sorted by length, longest first), drawn from a generator seeded by ``(seed, epoch)``.

    transformers' training sampler draws that order from torch's global random state, which a run
    resumed from a checkpoint reaches in another state than the uninterrupted run did at the same
    step: the resumed run trained on other batches and ended about 1e-4 away from it. Here the order
    depends only on ``(seed, epoch)``, as :class:`ShuffledLengthSampler`'s does.
    """

    def __iter__(self) -> Iterator[int]:
        from transformers.trainer_pt_utils import get_length_grouped_indices

        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return iter(get_length_grouped_indices(self.lengths, self.batch_size, generator=g))
