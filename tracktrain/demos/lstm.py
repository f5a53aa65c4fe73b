"""An LSTM language model on WikiText-2 trained with truncated backpropagation through time: Lightning's
`lightning.pytorch.demos.lstm` (after PyTorch's word_language_model example) with a `LoopModule`."""

from __future__ import annotations

from collections.abc import Iterator, Sized

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Sampler

from tracktrain.demos.transformer import WikiText2
from tracktrain.trainer import LoopModule

__all__ = ["LightningLSTM", "SequenceSampler", "SimpleLSTM"]


class SimpleLSTM(nn.Module):
    """Embedding, a `nlayers`-deep LSTM (batch first) and a linear decoder, with dropout after the embedding and
    after the LSTM: `forward(input, hidden)` gives the log-probabilities of the next word, flattened to
    `(batch * length, vocab_size)`, and the new hidden state."""

    def __init__(
        self, vocab_size: int = 33278, ninp: int = 512, nhid: int = 512, nlayers: int = 4, dropout: float = 0.2
    ) -> None:
        super().__init__()
        # the layers are made in this order, then re-initialised: the same draws as Lightning's demo
        self.vocab_size = vocab_size
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(vocab_size, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(nhid, vocab_size)
        self.nlayers = nlayers
        self.nhid = nhid
        self.init_weights()

    def init_weights(self) -> None:
        """Embedding and decoder weights uniform in [-0.1, 0.1], the decoder's bias zero."""
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, input: Tensor, hidden: tuple[Tensor, Tensor]) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """Log-probabilities `(batch * length, vocab_size)` for the word ids `input` (`(batch, length)`), and the
        LSTM's `(h, c)` after them."""
        embedded = self.drop(self.encoder(input))
        output, state = self.rnn(embedded, hidden)
        scores = self.decoder(self.drop(output)).view(-1, self.vocab_size)
        return F.log_softmax(scores, dim=1), state

    def init_hidden(self, batch_size: int) -> tuple[Tensor, Tensor]:
        """Zero `(h, c)`, each `(nlayers, batch_size, nhid)`, on the parameters' device and dtype."""
        like = next(self.parameters())
        shape = (self.nlayers, batch_size, self.nhid)
        return like.new_zeros(shape), like.new_zeros(shape)


class SequenceSampler(Sampler[list[int]]):
    """Batches for truncated BPTT: the dataset is cut into `batch_size` contiguous streams of
    `len(dataset) // batch_size` items, and batch `i` holds item `i` of every stream, so row `r` of consecutive
    batches continues the same text (the remainder past `batch_size` whole streams is left out)."""

    def __init__(self, dataset: Sized, batch_size: int) -> None:
        super().__init__()
        self.dataset = dataset
        self.batch_size = batch_size
        self.chunk_size = len(self.dataset) // self.batch_size

    def __iter__(self) -> Iterator[list[int]]:
        usable = len(self.dataset) - len(self.dataset) % self.batch_size
        for offset in range(self.chunk_size):
            yield list(range(offset, usable, self.chunk_size))

    def __len__(self) -> int:
        return self.chunk_size


class LightningLSTM(LoopModule):
    """`SimpleLSTM` trained on `WikiText2` with truncated BPTT: the hidden state is carried (detached) from batch to
    batch and reset after each epoch; NLL loss, logged as "train_loss"; SGD at lr 20."""

    def __init__(self, vocab_size: int = 33278) -> None:
        super().__init__()
        self.model = SimpleLSTM(vocab_size=vocab_size)
        self.hidden: tuple[Tensor, Tensor] | None = None

    def on_train_epoch_end(self) -> None:
        """Start the next epoch from a zero state."""
        self.hidden = None

    def train_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        """The NLL loss of the batch, continuing from the previous batch's state (no gradient through it)."""
        inputs, target = batch
        if self.hidden is None:
            self.hidden = self.model.init_hidden(inputs.size(0))
        carried = (self.hidden[0].detach(), self.hidden[1].detach())
        output, self.hidden = self.model(inputs, carried)
        loss = F.nll_loss(output, target.view(-1))
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def prepare_data(self) -> None:
        """Download WikiText-2 to ./data (once)."""
        WikiText2(download=True)

    def train_dataloader(self) -> DataLoader[tuple[Tensor, Tensor]]:
        """WikiText2 from ./data in `SequenceSampler` batches of 20 streams."""
        dataset = WikiText2()
        return DataLoader(dataset, batch_sampler=SequenceSampler(dataset, batch_size=20))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """SGD over all parameters at lr 20."""
        return torch.optim.SGD(self.parameters(), lr=20.0)
