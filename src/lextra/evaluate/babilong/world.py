"""bAbI's first five question-answering tasks (Weston et al. 2015, arXiv 1502.05698), generated from their
definitions (`qa1`..`qa5`): a small simulated world of actors, locations and objects, the facts its events are told
as, and one question whose answer the simulation gives, in bAbI's vocabulary. A story is a pure function of the
`random.Random` it is given."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from lextra.errors import ConfigError

ACTORS = ("Mary", "John", "Daniel", "Sandra")
#: qa5's actors
GIVERS = ("Bill", "Fred", "Jeff", "Mary")
LOCATIONS = ("bathroom", "bedroom", "garden", "hallway", "kitchen", "office")
OBJECTS = ("apple", "football", "milk")
MOVES = ("moved to", "went to", "travelled to", "journeyed to", "went back to")
GETS = ("got", "picked up", "grabbed", "took")
DROPS = ("dropped", "discarded", "put down", "left")
GIVES = ("gave", "passed", "handed")
OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}
#: BABILong's answer labels per task (`metrics.TASK_LABELS` of booydar/babilong)
LABELS: dict[str, tuple[str, ...]] = {
    "qa1": LOCATIONS,
    "qa2": LOCATIONS,
    "qa3": LOCATIONS,
    "qa4": LOCATIONS,
    "qa5": (*GIVERS, *OBJECTS),
}
#: redraws of a story whose question would be ambiguous or unanswerable before giving up (never reached in practice)
ATTEMPTS = 1000


@dataclass(frozen=True)
class Story:
    """The facts in order, the question and its one answer."""

    facts: list[str]
    question: str
    answer: str


@dataclass
class World:
    """Where each actor is, who holds each object, where each object not held lies, each object's locations in
    order, and every gift (giver, object, receiver)."""

    where: dict[str, str] = field(default_factory=dict)
    holder: dict[str, str] = field(default_factory=dict)
    lies: dict[str, str] = field(default_factory=dict)
    history: dict[str, list[str]] = field(default_factory=dict)
    gifts: list[tuple[str, str, str]] = field(default_factory=list)

    def location(self, item: str) -> str | None:
        """Where an object is (with its holder, or where it was left); None before anyone touched it."""
        return self.where.get(self.holder[item]) if item in self.holder else self.lies.get(item)

    def _track(self, item: str) -> None:
        place = self.location(item)
        trail = self.history.setdefault(item, [])
        if place is not None and (not trail or trail[-1] != place):
            trail.append(place)

    def move(self, actor: str, place: str) -> None:
        self.where[actor] = place
        for item, who in self.holder.items():
            if who == actor:
                self._track(item)

    def take(self, actor: str, item: str) -> None:
        self.lies.pop(item, None)
        self.holder[item] = actor
        self._track(item)

    def drop(self, actor: str, item: str) -> None:
        del self.holder[item]
        self.lies[item] = self.where[actor]

    def give(self, giver: str, item: str, receiver: str) -> None:
        self.holder[item] = receiver
        self.gifts.append((giver, item, receiver))


def act(rng: random.Random, world: World, actors: tuple[str, ...], kinds: tuple[str, ...]) -> str:
    """One event of a kind in `kinds` (drawn by its share among those the world allows now), applied; its sentence."""
    options: list[tuple[str, Callable[[], str]]] = []
    for actor in actors:
        here = world.where.get(actor)
        if "move" in kinds:
            options.append(("move", partial(_move, rng, world, actor)))
        if here is None:
            continue
        free = [o for o in OBJECTS if o not in world.holder and world.lies.get(o, here) == here]
        held = [o for o in OBJECTS if world.holder.get(o) == actor]
        mates = [b for b in actors if b != actor and world.where.get(b) == here]
        if "take" in kinds and free:
            options.append(("take", partial(_take, rng, world, actor, free)))
        if "drop" in kinds and held:
            options.append(("drop", partial(_drop, rng, world, actor, held)))
        if "give" in kinds and held and mates:
            options.append(("give", partial(_give, rng, world, actor, held, mates)))
    possible = {k for k, _ in options}
    kind = rng.choice([k for k in kinds if k in possible])  # a kind named twice in `kinds` is twice as likely
    return rng.choice([run for k, run in options if k == kind])()


def _move(rng: random.Random, world: World, actor: str) -> str:
    place = rng.choice([p for p in LOCATIONS if p != world.where.get(actor)])
    world.move(actor, place)
    return f"{actor} {rng.choice(MOVES)} the {place}."


def _take(rng: random.Random, world: World, actor: str, free: list[str]) -> str:
    item = rng.choice(free)
    world.take(actor, item)
    return f"{actor} {rng.choice(GETS)} the {item} there."


def _drop(rng: random.Random, world: World, actor: str, held: list[str]) -> str:
    item = rng.choice(held)
    world.drop(actor, item)
    return f"{actor} {rng.choice(DROPS)} the {item}."


def _give(rng: random.Random, world: World, actor: str, held: list[str], mates: list[str]) -> str:
    item, receiver = rng.choice(held), rng.choice(mates)
    world.give(actor, item, receiver)
    return f"{actor} {rng.choice(GIVES)} the {item} to {receiver}."


def qa1(rng: random.Random, facts: int) -> Story:
    """Moves only; where an actor who moved is now."""
    world = World()
    told = [act(rng, world, ACTORS, ("move",)) for _ in range(facts)]
    actor = rng.choice(sorted(world.where))
    return Story(told, f"Where is {actor}?", world.where[actor])


def qa2(rng: random.Random, facts: int) -> Story:
    """Moves, takes and drops; where an object someone has touched is now."""
    for _ in range(ATTEMPTS):
        world = World()
        told = [act(rng, world, ACTORS, ("move", "move", "take", "drop")) for _ in range(facts)]
        known = sorted(o for o in OBJECTS if world.location(o) is not None)
        if known:
            item = rng.choice(known)
            return Story(told, f"Where is the {item}?", str(world.location(item)))
    raise ConfigError(f"qa2: no object was taken in {ATTEMPTS} stories of {facts} facts; use more facts")


def qa3(rng: random.Random, facts: int) -> Story:
    """As qa2; where an object was before the location it is in (arrived at once only)."""
    for _ in range(ATTEMPTS):
        world = World()
        told = [act(rng, world, ACTORS, ("move", "move", "take", "drop")) for _ in range(facts)]
        fit = sorted(o for o, trail in world.history.items() if len(trail) >= 2 and trail.count(trail[-1]) == 1)
        if fit:
            item = rng.choice(fit)
            trail = world.history[item]
            return Story(told, f"Where was the {item} before the {trail[-1]}?", trail[-2])
    raise ConfigError(f"qa3: no object moved twice in {ATTEMPTS} stories of {facts} facts; use more facts")


def qa4(rng: random.Random, facts: int = 2) -> Story:
    """Two compass facts over three locations; a question one location answers (facts and their inverses)."""
    for _ in range(ATTEMPTS):
        a, b, c = rng.sample(LOCATIONS, 3)
        first, second = rng.choice(sorted(OPPOSITE)), rng.choice(sorted(OPPOSITE))
        pairs = [(a, first, b), (c, second, rng.choice((a, b)))]
        told = [f"The {x} is {d} of the {y}." for x, d, y in pairs]
        known = {*pairs, *((y, OPPOSITE[d], x) for x, d, y in pairs)}
        x, d, y = rng.choice(sorted(known))
        if rng.random() < 0.5:  # what is d of y? -> x
            answers = {s for s, e, t in known if e == d and t == y}
            question = f"What is {d} of the {y}?"
        else:  # what is x d of? -> y
            answers = {t for s, e, t in known if e == d and s == x}
            question = f"What is the {x} {d} of?"
        if len(answers) == 1:
            return Story(told, question, answers.pop())
    raise ConfigError("qa4: no unambiguous question found")


def qa5(rng: random.Random, facts: int) -> Story:
    """Moves, takes, drops and gifts; a question about the most recent gift that fits it."""
    for _ in range(ATTEMPTS):
        world = World()
        told = [act(rng, world, GIVERS, ("move", "take", "drop", "give", "give")) for _ in range(facts)]
        if not world.gifts:
            continue
        giver, item, receiver = world.gifts[-1]
        question, answer = rng.choice(
            [
                (f"Who gave the {item} to {receiver}?", giver),
                (f"Who received the {item}?", receiver),
                (f"What did {giver} give to {receiver}?", item),
                (f"Who did {giver} give the {item} to?", receiver),
                (f"Who gave the {item}?", giver),
            ]
        )
        return Story(told, question, answer)
    raise ConfigError(f"qa5: no gift in {ATTEMPTS} stories of {facts} facts; use more facts")


#: the generators, and the facts a story has by default (bAbI's stories range from 2 to dozens)
STORIES: dict[str, Callable[[random.Random, int], Story]] = {"qa1": qa1, "qa2": qa2, "qa3": qa3, "qa4": qa4, "qa5": qa5}
DEFAULT_FACTS = {"qa1": 6, "qa2": 10, "qa3": 14, "qa4": 2, "qa5": 10}
#: the fewest facts a story can answer its question with (qa3: a move, a take, a move; qa5: two moves, take, give)
MIN_FACTS = {"qa1": 1, "qa2": 2, "qa3": 3, "qa4": 2, "qa5": 4}
