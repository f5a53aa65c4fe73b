"""A small transformer language model on WikiText-2: Lightning's `lightning.pytorch.demos.transformer` (after
PyTorch's word_language_model example) with a `LoopModule` in place of the LightningModule.

The text is fetched with the standard library (`urllib`), so nothing beyond torch is needed.
"""

from __future__ import annotations

import math
import os
import urllib.request
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from tracktrain.trainer import LoopModule

__all__ = ["Dictionary", "LightningTransformer", "PositionalEncoding", "Transformer", "WikiText2", "tokenize"]

# the training split of WikiText-2 as PyTorch's example ships it (the file Lightning's demo downloads too)
_WIKITEXT2_URL = "https://raw.githubusercontent.com/pytorch/examples/main/word_language_model/data/wikitext-2/train.txt"
_DOWNLOAD_TIMEOUT_S = 60.0


class Transformer(nn.Module):
    """An encoder-decoder `nn.Transformer` over word embeddings: `forward(inputs, target)` gives the
    log-probabilities of the next word at every position of `target`, flattened to `(batch * length, vocab_size)`.

    `vocab_size` defaults to WikiText-2's training split (33278 words).
    """

    def __init__(
        self,
        vocab_size: int = 33278,
        ninp: int = 200,
        nhead: int = 2,
        nhid: int = 200,
        nlayers: int = 2,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        # the order the layers are made in fixes which random numbers each initialisation draws: keep it
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.embedding = nn.Embedding(vocab_size, ninp)
        self.transformer = nn.Transformer(
            d_model=ninp,
            nhead=nhead,
            num_encoder_layers=nlayers,
            num_decoder_layers=nlayers,
            dim_feedforward=nhid,
            dropout=dropout,
            batch_first=True,
        )
        self.decoder = nn.Linear(ninp, vocab_size)
        self.ninp = ninp
        self.vocab_size = vocab_size
        self.src_mask: Tensor | None = None

    def generate_square_subsequent_mask(self, size: int) -> Tensor:
        """A `(size, size)` additive mask: 0 on and below the diagonal, -inf above it (no position sees later
        ones)."""
        above = torch.triu(torch.ones(size, size), diagonal=1).bool()
        return torch.zeros(size, size).masked_fill(above, float("-inf"))

    def forward(self, inputs: Tensor, target: Tensor, mask: Tensor | None = None) -> Tensor:
        """Log-probabilities `(batch * length, vocab_size)` for `target` given `inputs` (both `(batch, length)` word
        ids); `mask` is the target's attention mask (by default each position sees itself and earlier ones)."""
        length = inputs.shape[1]
        if self.src_mask is None or self.src_mask.size(0) != length:
            # kept as Lightning's demo keeps it; like there, the encoder is not masked
            self.src_mask = self.generate_square_subsequent_mask(length).to(inputs.device)
        if mask is None:
            mask = self.generate_square_subsequent_mask(length).to(inputs.device)
        scale = math.sqrt(self.ninp)
        source = self.pos_encoder(self.embedding(inputs) * scale)
        shifted = self.pos_encoder(self.embedding(target) * scale)
        logits = self.decoder(self.transformer(source, shifted, tgt_mask=mask))
        return F.log_softmax(logits, dim=-1).view(-1, self.vocab_size)


class PositionalEncoding(nn.Module):
    """Adds a sinusoidal position encoding of width `dim` (for up to `max_len` positions), then dropout.

    The table is made on the first call, on the input's device (not a buffer or a parameter, so it is in no
    state_dict). As in Lightning's demo, every position gets the encoding of the row at index `length` (the
    sequence's length), not its own row: kept so that outputs equal Lightning's.
    """

    def __init__(self, dim: int, dropout: float = 0.1, max_len: int = 5000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.dim = dim
        self.max_len = max_len
        self.pe: Tensor | None = None

    def forward(self, x: Tensor) -> Tensor:
        """`x` (`(batch, length, dim)`) plus the encoding, through dropout."""
        if self.pe is None:
            self.pe = self._sinusoids(x.device)
        return self.dropout(x + self.pe[:, x.size(1)])

    def _sinusoids(self, device: torch.device) -> Tensor:
        """The `(1, max_len, dim)` table: sines in the even columns, cosines in the odd ones."""
        positions = torch.arange(0, self.max_len, dtype=torch.float, device=device).unsqueeze(1)
        frequencies = torch.exp(torch.arange(0, self.dim, 2, device=device).float() * (-math.log(10000.0) / self.dim))
        table = torch.zeros(self.max_len, self.dim, device=device)
        table[:, 0::2] = torch.sin(positions * frequencies)
        table[:, 1::2] = torch.cos(positions * frequencies)
        return table.unsqueeze(0)


class Dictionary:
    """Words and their ids, in the order they were first added."""

    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        """The id of `word`, added with the next id if it is new."""
        known = self.word2idx.get(word)
        if known is not None:
            return known
        self.word2idx[word] = len(self.idx2word)
        self.idx2word.append(word)
        return self.word2idx[word]

    def __len__(self) -> int:
        return len(self.idx2word)


def tokenize(path: Path) -> tuple[Tensor, Dictionary]:
    """The words of the text file at `path` as one int64 tensor of ids (each line's whitespace-separated words then
    "<eos>"), and the dictionary of those ids (in order of first appearance)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no text to tokenize at {path}")
    dictionary = Dictionary()
    ids: list[int] = []
    with open(path, encoding="utf8") as text:
        for line in text:
            ids.extend(dictionary.add_word(word) for word in [*line.split(), "<eos>"])
    return torch.tensor(ids, dtype=torch.int64), dictionary


class WikiText2(Dataset[tuple[Tensor, Tensor]]):
    """WikiText-2's training text (`data_dir/wikitext-2.txt`, downloaded first with `download=True` when it is not
    there) as consecutive blocks of `block_size` word ids: item `i` is `(inputs, target)`, the block starting at word
    `i * block_size` and the same block one word later."""

    def __init__(self, data_dir: Path | str = Path("./data"), block_size: int = 35, download: bool = True) -> None:
        super().__init__()
        self.path = Path(data_dir) / "wikitext-2.txt"
        if download:
            self.download(self.path)
        self.data, self.dictionary = tokenize(self.path)
        self.block_size = block_size

    @property
    def vocab_size(self) -> int:
        """How many distinct words (with "<eos>") the text has."""
        return len(self.dictionary)

    def __len__(self) -> int:
        return len(self.data) // self.block_size - 1

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        start = index * self.block_size
        stop = start + self.block_size
        return self.data[start:stop], self.data[start + 1 : stop + 1]

    @staticmethod
    def download(destination: Path) -> None:
        """Fetch the text to `destination` (making its folder) unless a file is there already."""
        os.makedirs(destination.parent, exist_ok=True)
        if os.path.exists(destination):
            return
        try:
            with urllib.request.urlopen(_WIKITEXT2_URL, timeout=_DOWNLOAD_TIMEOUT_S) as response:
                text = response.read().decode("utf8")
        except OSError as error:  # URLError and timeouts are OSErrors
            raise OSError(
                f"could not download WikiText-2 from {_WIKITEXT2_URL} ({error}); without network, put the text at "
                f"{destination} and pass download=False"
            ) from error
        partial = destination.with_name(destination.name + ".part")
        partial.write_text(text, encoding="utf8")
        os.replace(partial, destination)  # a download cut short leaves no file that looks complete


class LightningTransformer(LoopModule):
    """`Transformer` trained on `WikiText2` with the negative log-likelihood of the next word, SGD at lr 0.1."""

    def __init__(self, vocab_size: int = 33278) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size)

    def forward(self, inputs: Tensor, target: Tensor) -> Tensor:
        """The model's log-probabilities for `target` given `inputs`."""
        return self.model(inputs, target)

    def train_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        """The NLL loss of the batch's targets."""
        inputs, target = batch
        return F.nll_loss(self(inputs, target), target.view(-1))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """SGD over the model's parameters at lr 0.1."""
        return torch.optim.SGD(self.model.parameters(), lr=0.1)

    def prepare_data(self) -> None:
        """Download WikiText-2 to ./data (once)."""
        WikiText2(download=True)

    def train_dataloader(self) -> DataLoader[tuple[Tensor, Tensor]]:
        """WikiText2 from ./data, one block per batch."""
        return DataLoader(WikiText2())
