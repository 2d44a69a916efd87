"""The model beside `lm_train.py`, as pytorch/examples' word_language_model keeps its model.py."""

import torch
from torch import nn


class RNNModel(nn.Module):
    def __init__(self, tokens, embedding=200, hidden=200, layers=2, dropout=0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(tokens, embedding)
        self.rnn = nn.LSTM(embedding, hidden, layers, dropout=dropout)
        self.decoder = nn.Linear(hidden, tokens)
        self.layers, self.hidden = layers, hidden

    def forward(self, source, state):
        output, state = self.rnn(self.drop(self.encoder(source)), state)
        return self.decoder(self.drop(output)).view(-1, self.decoder.out_features), state

    def init_hidden(self, batch):
        zeros = torch.zeros(self.layers, batch, self.hidden)
        return zeros, zeros.clone()
