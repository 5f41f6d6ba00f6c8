import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)
        )

    def training_step(self, batch, i):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


torch.set_num_threads(1)
data = TensorDataset(torch.randn(32 * 200, 16), torch.randint(0, 4, (32 * 200,)))
trainer = pl.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=False,
                     enable_checkpointing=False, enable_model_summary=False,
                     accumulate_grad_batches=4)
trainer.fit(Model(), DataLoader(data, batch_size=32))
