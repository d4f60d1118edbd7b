"""checked_subclass: the subclass made for a user's class (a Dataset, a reward manager) reads and pickles as that class."""

from __future__ import annotations

import pickle

from reinforge.user_code import checked_subclass


class Plain:
    def __init__(self, n):
        self.n = n

    def get(self):
        return self.n


class Slotted:
    __slots__ = ("n",)

    def __init__(self, n):
        self.n = n

    def get(self):
        return self.n


def test_a_checked_subclass_is_named_as_the_users_class_and_pickles_as_it():
    for cls in (Plain, Slotted):
        checked = checked_subclass(cls, {"get": lambda self, base=cls: base.get(self) + 1})
        made = checked(41)
        assert isinstance(made, cls) and type(made).__name__ == cls.__name__ and made.get() == 42
        copy = pickle.loads(pickle.dumps(made))  # the user's class as it is, its state kept (slots too)
        assert type(copy) is cls and copy.get() == 41
