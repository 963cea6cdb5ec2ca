"""Sentence templates: how each world relation is stated, asked, updated and queried.

Every relation of the procedural worlds (:mod:`mags_lib.data.worlds`) has

* ``statements`` -- declarative paraphrases, placeholders ``{S}`` (subject) and ``{O}`` (object);
  rendered inputs for the *write* role, whose gold triplet is ``(subject, label, object)``;
* ``questions`` -- interrogative paraphrases with ``{S}``; rendered inputs for the *ask* role;
* ``first_person`` / ``first_person_questions`` -- persona variants ("I work as a {O}.") whose
  subject is the speaker;
* ``updates`` -- paraphrases announcing a changed value (``{O}`` new value, ``{OLD}`` old value),
  for functional relations only;
* ``noun`` -- the short noun used in the canonical ask query: ``"{S} {noun}"`` (``"blorps diet"``)
  or ``"{noun} of {descriptor}"`` for a multi-hop descriptor.

Linking relations (whose object is another world entity) also carry a ``descriptor``: a noun phrase
naming the object through the subject ("the natural enemies of {S}"), used by multi-hop questions.

Template ids are stable strings (``"diet.s2"``: statement 2 of relation ``diet``); every rendered
example records the ids it used so diversity can be measured per template. Verb agreement is fixed
per subject type: species names are plural ("blorps eat"), every other subject is singular; pronoun
substitution (:data:`PRONOUNS`) keeps that agreement ("they eat", "she works").
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "CHIT_CHAT",
    "CONNECTIVES",
    "CORRECTION_FRAMES",
    "DIALOGUE_INTROS",
    "EXCHANGE_FRAME",
    "PERSONA_INTROS",
    "PRONOUNS",
    "QUESTION_JOINERS",
    "RELATIONS",
    "RELATIONS_BY_TYPE",
    "RULE_CHANGE_PREFIXES",
    "SMALL_TALK",
    "UPDATE_PREFIXES",
    "Relation",
    "sentence_case",
    "template_counts",
]


@dataclass(frozen=True)
class Relation:
    """One relation of the world schema and all its surface forms."""

    key: str
    subject_type: str  # species | person | place | game | event | artifact
    label: str  # canonical relation text in gold triplets
    values: str  # value pool name (see worlds.VALUE_POOLS) or an entity type for linking relations
    noun: str  # used by the canonical ask query
    statements: tuple[str, ...]
    questions: tuple[str, ...]
    functional: bool = False
    updates: tuple[str, ...] = ()
    first_person: tuple[str, ...] = ()
    first_person_questions: tuple[str, ...] = ()
    descriptor: str | None = None  # noun phrase for the object, e.g. "the leader of {S}"
    linking: bool = field(default=False)

    def __post_init__(self) -> None:
        if not self.statements or not self.questions:
            raise ValueError(f"relation {self.key!r} needs statements and questions")
        for t in self.statements + self.updates + self.first_person:
            if "{O}" not in t:
                raise ValueError(f"template {t!r} of {self.key!r} lacks {{O}}")
        if self.functional and not self.updates:
            raise ValueError(f"functional relation {self.key!r} needs update templates")


def _r(key, subject_type, label, values, noun, statements, questions, **kw) -> Relation:
    return Relation(key, subject_type, label, values, noun, tuple(statements), tuple(questions),
                    **{k: tuple(v) if isinstance(v, list) else v for k, v in kw.items()})


RELATIONS: tuple[Relation, ...] = (
    # ---------------------------------------------------------------- species (plural subjects)
    _r("diet", "species", "eat", "food", "diet",
       ["{S} eat {O}.", "{S} feed mostly on {O}.", "The diet of {S} is {O}.",
        "{S} live on a diet of {O}.", "{S} love to eat {O}.",
        "Give {S} some {O} and they are happy.", "Mostly, {S} eat {O}."],
       ["What do {S} eat?", "What is the diet of {S}?", "What do {S} feed on?",
        "Which food do {S} live on?"],
       functional=True,
       updates=["{S} have switched their diet to {O}.", "{S} no longer eat {OLD}; they eat {O} now.",
                "These days {S} only eat {O}."]),
    _r("habitat", "species", "live in", "habitat", "habitat",
       ["{S} live in {O}.", "{S} make their home in {O}.", "You can find {S} in {O}.",
        "The natural habitat of {S} is {O}.", "{S} dwell in {O}."],
       ["Where do {S} live?", "What is the habitat of {S}?", "Where can one find {S}?",
        "Where do {S} make their home?"],
       functional=True,
       updates=["{S} have moved from {OLD} to {O}.", "{S} now live in {O}.",
                "{S} left {OLD} and settled in {O}."]),
    _r("color", "species", "have color", "color", "color",
       ["{S} are {O}.", "{S} have {O} fur.", "The color of {S} is {O}.", "{S} look {O}."],
       ["What color are {S}?", "What color is the fur of {S}?", "How do {S} look, color-wise?", "Do you know the color of {S}?"],
       functional=True,
       updates=["{S} have turned {O}.", "{S} are no longer {OLD}: they are {O} now."]),
    _r("fear", "species", "are afraid of", "fear", "fears",
       ["{S} are afraid of {O}.", "{S} fear {O}.", "Nothing scares {S} more than {O}.",
        "{S} run away from {O}."],
       ["What are {S} afraid of?", "What do {S} fear?", "What scares {S}?", "What makes {S} run away?"]),
    _r("ability", "species", "can", "ability", "abilities",
       ["{S} can {O}.", "{S} are able to {O}.", "Remarkably, {S} {O}."],
       ["What can {S} do?", "What are {S} able to do?", "What special ability do {S} have?", "What are {S} good at?"]),
    _r("nest", "species", "build nests from", "material", "nest material",
       ["{S} build nests out of {O}.", "{S} make their nests from {O}.",
        "The nests of {S} are made of {O}."],
       ["What do {S} build nests out of?", "What are the nests of {S} made of?", "Which material do {S} use for their nests?"]),
    _r("sleep", "species", "sleep for", "duration", "sleep duration",
       ["{S} sleep for {O} after a feast.", "After eating, {S} sleep for {O}.",
        "{S} usually nap for {O}."],
       ["How long do {S} sleep?", "For how long do {S} sleep after a feast?", "How much sleep do {S} need?"],
       functional=True,
       updates=["{S} now sleep for {O} instead of {OLD}.", "{S} have started sleeping for {O}."]),
    _r("lifespan", "species", "live for", "lifespan", "lifespan",
       ["{S} live for about {O}.", "A typical lifespan for {S} is {O}.", "{S} can reach {O} of age."],
       ["How long do {S} live?", "What is the lifespan of {S}?", "How old can {S} get?"]),
    _r("enemy", "species", "have natural enemy", "species", "natural enemy",
       ["The natural enemies of {S} are {O}.", "{S} are hunted by {O}.", "{O} prey on {S}.",
        "{S} are always at war with {O}."],
       ["Who are the natural enemies of {S}?", "What hunts {S}?", "Which creatures prey on {S}?", "Who do {S} have to watch out for?"],
       descriptor="the natural enemies of {S}", linking=True),
    _r("leader", "species", "are led by", "person", "leader",
       ["{S} are led by {O}.", "The chief of {S} is {O}.", "{O} leads {S}.",
        "{O} is the leader of {S}."],
       ["Who leads {S}?", "Who is the chief of {S}?", "Who is the leader of {S}?", "Who is in charge of {S}?"],
       functional=True, descriptor="the leader of {S}", linking=True,
       updates=["{OLD} stepped down; {S} are now led by {O}.", "The new chief of {S} is {O}.",
                "{O} has replaced {OLD} as the leader of {S}."]),
    # ---------------------------------------------------------------- person (singular)
    _r("job", "person", "works as", "job", "job",
       ["{S} works as a {O}.", "{S} is a {O} by trade.", "{S} earns a living as a {O}.",
        "By profession, {S} is a {O}.", "{S} has a job as a {O}.", "{S} makes money as a {O}."],
       ["What does {S} do for a living?", "What is the job of {S}?", "What does {S} work as?", "Where does {S} work and as what?", "What is the profession of {S}?"],
       functional=True,
       updates=["{S} quit being a {OLD} and is now a {O}.", "{S} has a new job as a {O}.",
                "{S} switched careers and works as a {O} now."],
       first_person=["I work as a {O}.", "I'm a {O} by trade.", "I earn my living as a {O}."],
       first_person_questions=["What do I do for a living?", "What is my job?"]),
    _r("home", "person", "lives in", "place", "home town",
       ["{S} lives in {O}.", "{S} has a house in {O}.", "{S} resides in {O}.", "{S} is based in {O}.",
        "{S} calls {O} home."],
       ["Where does {S} live?", "In which town does {S} live?", "Where is {S} based?", "Where is the home of {S}?"],
       functional=True, descriptor="the town where {S} lives", linking=True,
       updates=["{S} moved from {OLD} to {O}.", "{S} now lives in {O}.", "{S} has relocated to {O}."],
       first_person=["I live in {O}.", "My home is in {O}.", "I've lived in {O} for years."],
       first_person_questions=["Where do I live?", "Which town is my home?"]),
    _r("food", "person", "likes to eat", "food", "favorite food",
       ["{S} loves eating {O}.", "The favorite food of {S} is {O}.", "{S} can't get enough of {O}."],
       ["What does {S} like to eat?", "What is the favorite food of {S}?", "What should I cook for {S}?", "Which dish does {S} love?"],
       functional=True,
       updates=["{S} is tired of {OLD} and prefers {O} now.", "These days {S} loves {O} most."],
       first_person=["I love eating {O}.", "My favorite food is {O}."],
       first_person_questions=["What is my favorite food?"]),
    _r("allergy", "person", "is allergic to", "allergen", "allergies",
       ["{S} is allergic to {O}.", "{S} gets sick from {O}.", "{S} has an allergy to {O}."],
       ["What is {S} allergic to?", "Does {S} have any allergies?", "What should {S} avoid eating or touching?"],
       first_person=["I'm allergic to {O}.", "I have an allergy to {O}, keep that in mind."],
       first_person_questions=["What am I allergic to?"]),
    _r("pet", "person", "has pet", "pet", "pet",
       ["{S} has a pet called {O}.", "{S} owns a pet named {O}.", "{O} is the pet of {S}."],
       ["What is the name of the pet of {S}?", "What is the pet of {S} called?", "Does {S} have a pet, and what is its name?"],
       first_person=["My pet is called {O}.", "I have a pet named {O}."],
       first_person_questions=["What is my pet called?"]),
    _r("hobby", "person", "enjoys", "hobby", "hobby",
       ["{S} enjoys {O}.", "In the evenings, {S} goes {O}.", "The hobby of {S} is {O}.",
        "{S} spends every weekend {O}."],
       ["What is the hobby of {S}?", "What does {S} do for fun?", "What does {S} enjoy?", "How does {S} spend the weekends?"],
       functional=True,
       updates=["{S} gave up {OLD} and took up {O}.", "{S} has a new hobby: {O}."],
       first_person=["I enjoy {O}.", "My hobby is {O}.", "I go {O} every weekend."],
       first_person_questions=["What is my hobby?", "What do I do for fun?"]),
    _r("instrument", "person", "plays", "instrument", "instrument",
       ["{S} plays the {O}.", "{S} has played the {O} since childhood.", "{S} practises the {O} daily."],
       ["Which instrument does {S} play?", "What does {S} play?", "What instrument has {S} been practising?"],
       first_person=["I play the {O}.", "I've been practising the {O} lately."],
       first_person_questions=["Which instrument do I play?"]),
    _r("age", "person", "has age", "age", "age",
       ["{S} is {O} years old.", "{S} turned {O} this year.", "{S} is aged {O}."],
       ["How old is {S}?", "What is the age of {S}?", "What age is {S} now?"],
       functional=True,
       updates=["{S} just had a birthday and is {O} now.", "{S} is {O} now, not {OLD}."],
       first_person=["I'm {O} years old.", "I just turned {O}."],
       first_person_questions=["How old am I?"]),
    _r("sibling", "person", "has sibling", "person", "sibling",
       ["{S} has a sibling named {O}.", "{O} is the sibling of {S}.", "{S} and {O} are siblings."],
       ["Who is the sibling of {S}?", "What is the name of the sibling of {S}?", "Does {S} have a brother or sister?"],
       descriptor="the sibling of {S}", linking=True,
       first_person=["My sibling is called {O}.", "I have a sibling named {O}."],
       first_person_questions=["What is my sibling called?"]),
    # ---------------------------------------------------------------- place (singular)
    _r("near", "place", "is near", "place", "neighbour",
       ["{S} is near {O}.", "{S} lies close to {O}.", "{S} is a short walk from {O}."],
       ["What is near {S}?", "Which place lies close to {S}?", "What is close to {S}?"]),
    _r("climate", "place", "has climate", "climate", "climate",
       ["{S} is always {O}.", "The weather in {S} is {O}.", "{S} has a {O} climate."],
       ["What is the weather like in {S}?", "What is the climate of {S}?", "Should I pack an umbrella for {S}?"],
       functional=True,
       updates=["{S} has become {O} lately.", "The weather in {S} turned {O}."]),
    _r("famous", "place", "is famous for", "landmark", "fame",
       ["{S} is famous for {O}.", "{S} is known for {O}.", "People visit {S} for {O}."],
       ["What is {S} famous for?", "What is {S} known for?", "Why do people visit {S}?"]),
    # ---------------------------------------------------------------- game rules (singular)
    _r("start_points", "game", "starts players with", "points", "starting points",
       ["In {S}, every player starts with {O}.", "Players of {S} begin with {O}.",
        "{S} gives each player {O} at the start."],
       ["How many points does a player start with in {S}?", "What do players of {S} begin with?", "What is the starting score in {S}?"],
       functional=True,
       updates=["Rule change: in {S}, players now start with {O}.",
                "From now on, {S} players begin with {O} instead of {OLD}."]),
    _r("goal", "game", "is won at", "points", "winning score",
       ["{S} is won by reaching {O}.", "The goal of {S} is to reach exactly {O}.",
        "In {S}, the first player to reach {O} wins."],
       ["How do you win {S}?", "What score wins {S}?", "What is the goal of {S}?"],
       functional=True,
       updates=["Rule change: {S} is now won at {O}.", "The winning score of {S} changed to {O}."]),
    _r("dice", "game", "is played with", "dice", "dice",
       ["{S} is played with {O}.", "{S} uses {O}.", "To play {S} you need {O}."],
       ["What is {S} played with?", "Which dice does {S} use?", "What do I need to play {S}?"],
       functional=True,
       updates=["Rule change: {S} is now played with {O}.", "{S} switched to {O}."]),
    _r("referee", "game", "has referee", "person", "referee",
       ["The referee of {S} is {O}.", "{O} referees {S}.", "{S} is refereed by {O}."],
       ["Who is the referee of {S}?", "Who referees {S}?", "Who judges the games of {S}?"],
       functional=True, descriptor="the referee of {S}", linking=True,
       updates=["{OLD} retired; the new referee of {S} is {O}.", "{S} is now refereed by {O}."]),
    _r("double_rule", "game", "on a double roll players", "penalty", "double roll rule",
       ["In {S}, a player who rolls a double must {O}.", "Rolling a double in {S} means you {O}.",
        "{S} rules say: roll a double and you {O}."],
       ["What happens when you roll a double in {S}?", "What must a player who rolls a double in {S} do?"],
       functional=True,
       updates=["Rule change: in {S}, rolling a double now means you {O}.",
                "From today, a double in {S} makes you {O} instead of {OLD}."]),
    # ---------------------------------------------------------------- events (singular)
    _r("venue", "event", "is held in", "place", "venue",
       ["The {S} is held in {O}.", "Every year the {S} takes over {O}.", "The {S} happens in {O}."],
       ["Where is the {S} held?", "Where does the {S} take place?", "Where should I go for the {S}?"],
       functional=True, descriptor="the place where the {S} is held", linking=True,
       updates=["The {S} has moved from {OLD} to {O}.", "This year the {S} will be held in {O}."]),
    _r("month", "event", "takes place in", "month", "month",
       ["The {S} takes place in {O}.", "The {S} is celebrated every {O}.", "The {S} comes around each {O}."],
       ["When is the {S}?", "In which month is the {S} celebrated?", "What month does the {S} happen in?"],
       functional=True,
       updates=["The {S} moved from {OLD} to {O}.", "The {S} will be in {O} from now on."]),
    _r("organizer", "event", "is organized by", "person", "organizer",
       ["The {S} is organized by {O}.", "{O} organizes the {S}.", "{O} runs the {S} every year."],
       ["Who organizes the {S}?", "Who is in charge of the {S}?", "Who runs the {S}?"],
       functional=True, descriptor="the organizer of the {S}", linking=True,
       updates=["{O} took over the {S} from {OLD}.", "The {S} is now organized by {O}."]),
    # ---------------------------------------------------------------- artifacts (singular)
    _r("material", "artifact", "is made of", "artifact_material", "material",
       ["The {S} is made of {O}.", "The {S} was carved from {O}.", "The {S} is crafted out of {O}."],
       ["What is the {S} made of?", "What material is the {S}?", "What was the {S} made from?"]),
    _r("kept", "artifact", "is kept in", "place", "location",
       ["The {S} is kept in {O}.", "The {S} is stored in {O}.", "You can see the {S} in {O}."],
       ["Where is the {S} kept?", "Where can one see the {S}?", "Where is the {S} stored these days?"],
       functional=True, descriptor="the place where the {S} is kept", linking=True,
       updates=["The {S} was moved from {OLD} to {O}.", "The {S} is now kept in {O}."]),
    _r("owner", "artifact", "is owned by", "person", "owner",
       ["The {S} belongs to {O}.", "{O} owns the {S}.", "The {S} is the property of {O}."],
       ["Who owns the {S}?", "To whom does the {S} belong?", "Whose is the {S}?"],
       functional=True, descriptor="the owner of the {S}", linking=True,
       updates=["{O} bought the {S} from {OLD}.", "The {S} now belongs to {O}."]),
)

RELATIONS_BY_KEY: dict[str, Relation] = {r.key: r for r in RELATIONS}
RELATIONS_BY_TYPE: dict[str, tuple[Relation, ...]] = {}
for _rel in RELATIONS:
    RELATIONS_BY_TYPE.setdefault(_rel.subject_type, ())
    RELATIONS_BY_TYPE[_rel.subject_type] += (_rel,)

# Pronoun per subject type, chosen so that verb agreement of the templates holds.
PRONOUNS: dict[str, dict[str, str]] = {
    "species": {"subj": "they", "poss": "their"},
    "person_f": {"subj": "she", "poss": "her"},
    "person_m": {"subj": "he", "poss": "his"},
    "place": {"subj": "it", "poss": "its"},
    "game": {"subj": "it", "poss": "its"},
}

CONNECTIVES: tuple[str, ...] = ("", "", "", "Also, ", "Oh, and ", "By the way, ", "Besides, ",
                                "On top of that, ", "Another thing: ", "Plus, ")
QUESTION_JOINERS: tuple[str, ...] = (" ", " And ", " Also, ", " Oh, and ", " Another question: ")

PERSONA_INTROS: tuple[str, ...] = ("Hi, I'm {N}.", "{N} here.", "Hello! My name is {N}.",
                                   "Hey, it's {N} again.", "This is {N} speaking.", "{N}: ")

# A dialogue turn as the agent gives it to the write model ("<speaker>: <text>", MAGSConfig.write_speaker):
# the speaker {N} greets another person {A} first, whose name is not the subject of what "I" says. (The
# speaker-turns benchmark, mags_lib.bench.speaker_turns, greets with other phrases: held out.)
DIALOGUE_INTROS: tuple[str, ...] = ("{N}: Hey {A}!", "{N}: Hello {A}.", "{N}: {A}, listen.",
                                    "{N}: Good morning, {A}!", "{N}: Long time no see, {A}!", "{N}: You know what, {A}?",
                                    "{N}: Haha, {A}, that's great.", "{N}: Thank you so much, {A}.")

CHIT_CHAT: tuple[str, ...] = (
    "Nice weather today, isn't it?", "Hmm, let me think.", "Thanks for your help earlier!",
    "I had such a long day.", "Anyway, that's enough about that.", "Sorry for the late reply.",
    "Haha, that's funny.", "Good morning!", "I'm not sure how to put this.", "Okay, cool.",
    "Let me know if you need anything.", "I was just thinking out loud.", "Wow, time flies.",
    "Can you keep a secret?", "Hold on a second.", "Honestly, I have no idea.", "That reminds me of something.",
    "Well, here goes.", "Sounds good to me.", "Ugh, Mondays.", "I hope you're doing well.",
    "See you later!", "Never mind.", "Interesting, tell me more.", "That was a great chat.",
    "My coffee went cold again.", "I can't believe it's already evening.", "Oops, typo.",
    "Sorry, I got distracted.", "What a week it has been.", "Bear with me.", "Right, where was I?",
    "I'll be quick.", "This is a bit random, but okay.", "Long story short.",
)

# What people say to each other in a conversation that states no fact (reactions, wishes, questions back):
# the write data's small_talk turns ("<speaker>: <small talk>") and some persona turns carry it, gold: nothing.
SMALL_TALK: tuple[str, ...] = (
    "That's awesome, I'm so happy for you!", "How did it go?", "Take care of yourself!",
    "I totally get what you mean.", "That sounds like so much fun.", "Keep it up!",
    "What have you been up to lately?", "Thanks, that means a lot to me.", "I can't wait to hear more about it.",
    "Wow, that's impressive!", "You deserve it.", "Let's catch up soon.", "I'm glad you liked it.",
    "That must have been hard.", "Oh no, I'm sorry to hear that.", "Good luck with everything!",
    "It was great talking to you.", "Tell me all about it.", "I know, right?", "Yeah, totally.",
    "That's so sweet of you.", "I'll keep that in mind.", "How are you feeling about it?",
    "Congrats, that's huge!", "No worries at all.", "Stay safe out there!", "I feel the same way.",
    "Have a great weekend!", "That's a good point.", "It's been ages since we talked.",
)

UPDATE_PREFIXES: tuple[str, ...] = ("", "", "Update: ", "News: ", "Big news: ", "Heads up: ",
                                    "New discovery: ", "Things have changed. ")
RULE_CHANGE_PREFIXES: tuple[str, ...] = ("", "Rule change: ", "Attention players! ", "New rule: ")
CORRECTION_FRAMES: tuple[str, ...] = (
    "Actually, I was wrong earlier: {STATEMENT}", "Correction: {STATEMENT}",
    "Scratch what I said before about {OLD}. {STATEMENT}", "No wait, not {OLD}. {STATEMENT}",
    "Sorry, my mistake, it isn't {OLD}. {STATEMENT}", "Let me correct myself: {STATEMENT}",
)
# Leads and tails that frame a whole input without changing its facts or questions.
STATEMENT_LEADS: tuple[str, ...] = (
    "Fun fact: ", "Just so you know, ", "For the record, ", "Good to know: ", "It turns out that ",
    "Note: ", "As it happens, ", "Here's something: ", "Let me tell you something. ", "Remember this: ",
    "Okay, so ", "Listen, ")
QUESTION_LEADS: tuple[str, ...] = (
    "Quick question: ", "Hey, ", "Remind me: ", "I forgot: ", "Help me out here. ", "One thing: ",
    "Sorry to bother you, but ", "Let me check something. ", "Hmm. ", "Okay, next one. ", "Tell me, ")
QUESTION_TAILS: tuple[str, ...] = (" Thanks!", " I can't remember.", " Any idea?", " Please.",
                                   " I need to know.", " It's for a quiz.")
EXCHANGE_FRAME = ("Output Generated. Write Memory.\nInput Question: {QUESTION}\nMemory:\n{MEMORY}\n"
                  "Generated Thinking and Response: {RESPONSE}")


def sentence_case(text: str) -> str:
    """Capitalise the first letter only (``"blorps eat."`` -> ``"Blorps eat."``)."""
    return text[:1].upper() + text[1:] if text else text


def template_counts() -> dict[str, int]:
    """Number of distinct sentence templates available to each role.

    >>> c = template_counts()
    >>> c["write"] >= 30 and c["ask"] >= 30
    True
    """
    write = sum(len(r.statements) + len(r.updates) + len(r.first_person) for r in RELATIONS)
    write += len(CORRECTION_FRAMES) + len(STATEMENT_LEADS)
    ask = sum(len(r.questions) + len(r.first_person_questions) for r in RELATIONS)
    ask += sum(1 for r in RELATIONS if r.linking)  # multi-hop descriptors
    ask += len(QUESTION_LEADS) + len(QUESTION_TAILS)
    return {"write": write, "ask": ask}
