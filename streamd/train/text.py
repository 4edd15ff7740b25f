"""Random voice-assistant English text for the synthetic training corpus.

:class:`TextGenerator`: a seeded template grammar (:mod:`streamd.train.grammar`: the template language and
the slot fillers; numbers are spelled by :mod:`streamd.text.numbers`, vocabulary is the data of
:mod:`streamd.train.vocab`).  Each intent (lights,
  thermostat, timers, alarms, reminders, calendar, music, volume, playback,
  weather, calls, messages, shopping, numbers, dates, short answers, ...) has
  several templates in a tiny language -- ``(a|b)`` one alternative, ``[x]``
  optional, ``$slot`` a random filler (time, date, name, amount, vocabulary
  entry...) -- so each template expands to thousands of sentences.  Commands
  are further wrapped in optional request prefixes/suffixes (only around
  imperatives) or discourse markers and sometimes joined in pairs, so word
  orders and combinations vary far beyond the template count.

Normalization (the transcript convention of the whole project): lower-case
words separated by single spaces, numbers spelled out, hyphens written as
spaces ("twenty one"), apostrophes kept ("what's"), nothing but ``a-z``,
space and apostrophe.  "a.m." is written "a m".  :func:`spoken_form` turns a
normalized sentence back into text that TTS engines pronounce correctly.
Everything is deterministic given the seed (``random.Random``).
"""

from __future__ import annotations

import re

from ..text.numbers import cardinal, decimal, digits, money, ordinal, percent
from .grammar import Grammar
from .vocab import V

__all__ = ["is_normalized", "spoken_form", "TextGenerator", "KEYWORD"]

KEYWORD = "hey stream"

_NORM_RE = re.compile(r"[a-z']+( [a-z']+)*")
_KEYWORD_RE = re.compile(r"\bhey stream\b")


def _an(phrase: str) -> str:
    """Indefinite article for ``phrase`` ("an eighty", "an hour", "a one", "a five")."""
    w = phrase.split()[0]
    vowel = w in ("eight", "eighteen", "eighty", "eleven", "hour", "hours") or (
        w[0] in "aeio" and not w.startswith("one"))
    return "an" if vowel else "a"


def is_normalized(text: str) -> bool:
    """True iff ``text`` is non-empty lower-case words of a-z/apostrophe separated by single spaces."""
    return bool(_NORM_RE.fullmatch(text))


_SPOKEN_FIXES = ((re.compile(r"\ba m\b"), "a.m."), (re.compile(r"\bp m\b"), "p.m."))


def spoken_form(text: str) -> str:
    """Text to feed a TTS engine for a normalized sentence (engines read "a m" as "uh em")."""
    for pat, rep in _SPOKEN_FIXES:
        text = pat.sub(rep, text)
    return text


class TextGenerator(Grammar):
    """Seeded random generator of normalized voice-assistant sentences.

    ``sentence()`` gives an in-domain utterance (command, question, statement
    or short answer); ``keyword_sentence()`` starts with "hey stream" (often
    followed by a command, sometimes alone); ``confusable_negative()`` gives
    an utterance without the wake phrase but with something that sounds or
    reads like it ("hey steve", "ice cream", "mainstream", ...).
    """

    def __init__(self, seed: int, slot_focus: float = 0.0) -> None:
        """``slot_focus``: share of ``sentence()`` drawn from :meth:`slot_drill` (open-class words:
        names, places, groceries, artists) instead of the full grammar.  At 0 (the default) no
        extra random draw is made, so corpora made before this option existed are reproduced."""
        if not 0.0 <= slot_focus <= 1.0:
            raise ValueError(f"slot_focus must be in [0, 1], got {slot_focus}")
        super().__init__(seed)
        self.slot_focus = slot_focus

    # ---------------------------------------------------------------- intents
    # Templates: (a|b|c) picks one alternative (may be empty), [x] is optional,
    # $slot is a keyword argument, a method of this class, or (UPPER CASE) a
    # random entry of the vocabulary list V.SLOT.  Each intent picks one template.

    def lights(self) -> str:
        off = self.rng.random() < 0.5
        verb = "(turn|switch|flip|shut)" if off else "(turn|switch|flip)"
        return self.t(self.c(
            f"{verb} $onoff (the|the|my|all the|all of the) $ROOMS $LIGHTS",
            f"{verb} (the|my) $ROOMS $LIGHTS $onoff",
            f"{verb} $onoff the $LIGHTS in the $ROOMS",
            "$ROOMS $LIGHTS $onoff",
            "lights $onoff[ in the $ROOMS]",
            "(dim|brighten|set|change) the $LIGHTS[ in the $ROOMS] to $pct",
            "(set|change|make|turn) the $ROOMS $LIGHTS [to ]$COLORS",
            "make (it|the $ROOMS|the lights) (brighter|darker|dimmer|a bit brighter|a little darker|warmer|cooler)"
            "[ in here]",
            "(are|did i leave) the $LIGHTS (on|off) in the $ROOMS",
            "(dim|lower|bring down|turn down|raise|brighten|bring up|turn up) the $ROOMS $LIGHTS by $pct",
            f"{verb} $onoff every light (in the house|downstairs|upstairs|except the $ROOMS)",
            "set the $ROOMS $LIGHTS to (full brightness|half brightness|level $small|$pct)",
            "(turn|switch) (on|off) the $LIGHTS (in the $ROOMS|at $time|in $duration)",
        ), onoff="off" if off else "on")

    def devices(self) -> str:
        return self.t(self.c(
            "(turn|switch) (on|off) the [$ROOMS ]$DEVICES",
            "(turn|switch) the $DEVICES[ in the $ROOMS] (on|off)",
            "(lock|unlock|open|close) the $DOORS",
            "is the $DOORS (locked|open|closed|unlocked)",
            "(start|stop|pause|run) the (dishwasher|washing machine|dryer|vacuum|robot vacuum|sprinklers|coffee maker)"
            "[ $when]",
            "(open|close|raise|lower) the (blinds|curtains|shades|shutters)[ in the $ROOMS][ halfway]",
            "set the (fan|ceiling fan|air purifier|humidifier) to (low|medium|high|speed $small|auto)",
            "(preheat|set) the oven to $oven[ degrees]",
        ), oven=lambda: cardinal(self.c((325, 350, 375, 400, 425, 450, self.n(150, 500)))))

    def thermostat(self) -> str:
        return self.t(self.c(
            "set $thing to $temperature",
            "(raise|lower|increase|decrease|turn up|turn down|bump up) $thing by $small[ degrees]",
            "(what is|what's) the temperature (inside|in the $ROOMS|in here|outside|upstairs)",
            "make it (warmer|cooler|a little warmer|a bit cooler|colder|hotter)[ in here]",
            "(i'm|it's|we're) (cold|hot|freezing|too warm|a bit chilly)",
            "(switch|set|change) the thermostat to (heat|cool|auto|eco|off)[ mode]",
            "(keep|set) the $ROOMS at $temperature $day",
            "$thing to $temperature",
        ), thing="(the thermostat|the heat|the temperature|the heating|the air conditioning)")

    def timer(self) -> str:
        length = self.timer_length()
        return self.t(self.c(
            "set a timer for $duration",
            "(set|start|create|make) $a $length timer",
            "(set|start) a $TIMER_NAMES timer for $duration",
            "timer $duration",
            "how much time is left on (the|my) [$TIMER_NAMES ]timer",
            "(cancel|stop|pause|resume|delete) the [$TIMER_NAMES ]timer",
            "add $duration to (the|my) [$TIMER_NAMES ]timer",
            "(count down from|start a countdown from) $num",
            "$length timer for the $TIMER_NAMES",
        ), a=_an(length), length=length)

    def alarm(self) -> str:
        return self.t(self.c(
            "set an alarm for $time[ $day]",
            "wake me up at $time[ $day]",
            "$day wake me [up ]at $time",
            "(cancel|delete|turn off|disable|remove) (my|the) $time alarm",
            "(snooze|snooze for $duration|stop the alarm|turn off the alarm|dismiss)",
            "(what alarms do i have|when is my next alarm)[ $day]",
            "what time is my alarm set for[ $dayb]",
            "do i have an alarm set for $dayb",
            "set a (recurring|daily|weekday|weekend) alarm (for|at) $time",
            "(move|change) my alarm (to|from $time to) $time",
        ))

    def reminder(self) -> str:
        return self.t(self.c(
            "remind me to $TASKS $when",
            "remind me $when to $TASKS",
            "(set|create|add) a reminder (to|for me to) $TASKS[ $when]",
            "(don't let me forget|make sure i remember|remind me) to $TASKS",
            "(what are my reminders|what reminders do i have|read my reminders|do i have any reminders)[ for $dayb]",
            "(cancel|delete|remove) (the|my) reminder to $TASKS",
            "$when remind me to $TASKS",
        ))

    def calendar(self) -> str:
        return self.t(self.c(
            "(schedule|book|add|set up|put) a $EVENTS with $name $when",
            "what's on my calendar ($day|on $date)",
            "(when is|where is|what time is) my [next ]$EVENTS",
            "the $EVENTS is (on $WEEKDAYS|$day|on $date) at $time",
            "(move|reschedule|push) my $EVENTS [with $name ]to ($day|$time|next week)",
            "(cancel|delete) (my|the) $EVENTS (with $name|on $WEEKDAYS|$day)",
            "am i free $when",
            "i have a $EVENTS $when",
        ))

    def music(self) -> str:
        return self.t(self.c(
            "play $MUSIC$where",
            "(put on|start playing|i want to hear|let's hear|can i hear) $MUSIC$where",
            "play (my|the) $PLAYLISTS playlist$where",
            "play (the latest episode of|the news on|the podcast) $PODCASTS",
            "play something (relaxing|upbeat|calm|fun)",
            "play (some music|a song|music|songs) (for dinner|to help me sleep|for working out|i like|from the eighties"
            "|from the nineties|from $year|for kids|to dance to)",
            "(what song is this|who sings this|what's playing|what album is this from|who is this artist)",
            "(shuffle|play) (my|the) $PLAYLISTS (playlist|mix|station)",
            "play $STATIONS radio",
            "(add this song to|save this to|remove this from) my $PLAYLISTS playlist",
        ), where="( in the $ROOMS| on the $ROOMS speaker| everywhere| on all speakers||||||||)",
            year=lambda: self.year(1960, 2024))

    def volume(self) -> str:
        return self.t(self.c(
            "(set|change|put) the volume to ($small|$pct|$num)",
            "volume (up|down|$small|to $num)[ by $small]",
            "turn (it|the volume|the music|the sound|the $ROOMS speaker) (up|down)[ (a little|a bit|a lot|by $small)]",
            "(louder|quieter|softer|a little louder|a bit quieter|too loud|i can't hear it)",
            "(mute|unmute)[ (the speaker|the television|the music|yourself|the $ROOMS)]",
            "(increase|decrease|raise|lower) the volume (by $num|to $pct|)",
            "what's the volume[ at]",
            "(make it|make the music|can you make it) (louder|quieter|a little softer)",
        ))

    def playback(self) -> str:
        return self.t(self.c(
            "$PLAYBACK",
            "(skip|rewind|go back|fast forward|jump ahead|skip ahead) ($seconds seconds|$duration)",
            "(skip|go|jump) to (track|song|chapter|episode) $num",
            "(play|skip to|go to) the $nth (song|track|chapter|episode)",
            "(play|watch|put on|resume) season $small episode $num",
            "(pause|resume|stop|play|restart|skip|replay|continue) the (music|song|podcast|movie|show|video|audiobook)",
        ), seconds=lambda: cardinal(self.n(5, 90)), nth=lambda: ordinal(self.n(1, 30)))

    def weather(self) -> str:
        return self.t(self.c(
            "what's the weather[ like][ in $CITIES][ $dayb]",
            "(will it|is it going to|does it look like it will) (rain|snow|be sunny|be windy|be cold|storm) "
            "($dayb|in $CITIES|$dayb in $CITIES)",
            "(what's the|tell me the|give me the) forecast for ($dayb|$CITIES|the weekend|next week|this week)",
            "(how hot|how cold|how warm|how windy) (is it|will it be) ($dayb|outside|in $CITIES)",
            "do i need (an umbrella|a jacket|a coat|sunscreen) $dayb",
            "what's the (temperature|humidity|wind speed|chance of rain|pollen count|high|low) "
            "($dayb|in $CITIES|right now|outside)",
            "is it (raining|snowing|cold|sunny) in $CITIES",
            "weather in $CITIES[ $dayb]",
        ))

    def call(self) -> str:
        return self.t(self.c(
            "(call|phone|ring|dial|video call|facetime) $name[ (on mobile|at home|at work|on speaker|on the cell)]",
            "(call|dial) $phone",
            "call (home|work|the office)[ (now|please)]",
            "(my number is|my phone number is|the number is|you can reach me at|call me back at) $phone",
            "(answer|decline|hang up|ignore) (the call|it|)",
            "who (called|called me|texted me|was at the door)[ $past_day]",
            "(call|get) $name on the phone",
        ))

    def message(self) -> str:
        return self.t(self.c(
            "(text|message|send a message to|send a text to|tell) $name (saying|that|) $MESSAGES",
            "send $name a (message|text|note) (saying|that says) $MESSAGES",
            "(read|check|play) my (messages|texts|new messages|voicemail|email)[ from $name]",
            "(reply|respond) [to $name ](with|saying) $MESSAGES",
            "tell $name i'll be (late|there|home|back) in $duration",
            "did $name (text|call|email|message) me[ $past_day]",
            "(email|send an email to) $name about (the|my|our) $EVENTS $day",
        ))

    def shopping(self) -> str:
        item = self.c(V.GROCERIES)
        return self.t(self.c(
            "(add|put) $items (to|on) (my|the) $list",
            "(remove|take|delete) $items (from|off) (my|the) $list",
            "(what's on|read|show me|what is on) my $list",
            "(we need|we're out of|i need|we're running low on) $items",
            "(order|buy|reorder) ($count|more|some) $GROCERIES",
            f"{'are' if item.endswith('s') else 'is'} $item on (my|the) $list",
            "(clear|empty|share) my $list",
        ), item=item, list="(shopping list|grocery list|list|shopping list|to do list)")

    def numbers(self) -> str:
        return self.t(self.c(
            "my (code|pin|pin number|zip code|confirmation code|access code|account number|order number|member number"
            "|passcode) is $code",
            "the (code|door code|gate code|wifi password|tracking number|flight number|room number|reference number)"
            " is $code",
            "(what's|what is|calculate|how much is) $num3 (plus|minus|times|divided by) $num",
            "(convert|what's) $quantity $UNIT_PAIRS",
            "how many $HOW_MANY",
            "(it costs|the total is|that comes to|i paid|i owe you|the bill was|pay|send) $amount",
            "(how much is|what's) $amount in (euros|dollars|pounds|yen|pesos)",
            "(it's|that's|there's a|they're offering) $pct (off|discount|interest|battery|humidity|chance of rain)",
            "what's $pct of $num4",
            "the population of $CITIES is $big_number",
            "($CITIES has about|there are|roughly) $big_number people[ live in $CITIES]",
            "we have $big_number (followers|subscribers|customers|visitors)",
            "(the house costs|the car was|they sold it for|the budget is|we raised) $big_number "
            "(dollars|euros|pounds)",
            "(i was born in|we moved here in|that was in|it happened in|the song came out in|the company started in)"
            " $year",
            "(i'm|she's|he's|my son is|my daughter is|grandpa is) $age years old",
            "(i live at|the address is|send it to|deliver it to) $house_number $STREETS",
            "(what's the square root of|what's|spell|say) $big_number",
            "(pick|give me) a random number between $small and $num4",
        ), num3=lambda: self.number(0, 1000), num4=lambda: self.number(11, 10_000),
            quantity=lambda: self.c(cardinal(self.n(1, 500)), decimal(f"{self.n(0, 99)}.{self.n(1, 9)}")),
            year=lambda: self.year(1900, 2030), age=lambda: cardinal(self.n(1, 99)),
            house_number=lambda: self.c(cardinal(self.n(1, 9999)), digits(str(self.n(10, 9999)))))

    def dates(self) -> str:
        return self.t(self.c(
            "what day (is|was|will it be on) $date",
            "how many days (until|till|are left until|since) ($date|christmas|my birthday|the weekend|new year's eve)",
            "(my birthday is|our anniversary is|the party is|the deadline is|we leave|school starts) [on ]$date",
            "what's the date (today|tomorrow|next friday|on $WEEKDAYS)",
            "(what year is it|what's today's date|what day is it|what's the date)",
            "(book a table for|reserve a table for|table for) $count [people ](on $date|$day) at $time",
            "set the date to $date",
        ))

    def clock(self) -> str:
        return self.t(self.c(
            "(what time is it|what's the time|do you have the time|tell me the time|what time is it now)",
            "what time is it in $CITIES",
            "how long (until|till) $time",
            "it's $time",
            "(what time does|when does) (the store|the pharmacy|the bank|the library|the gym|the game|the movie)"
            " (open|close|start)[ $day]",
            "(what time does|when does) the sun (rise|set)[ $day]",
        ))

    def answer(self) -> str:
        return self.c(V.ANSWERS)

    def misc(self) -> str:
        return self.t(self.c(
            "$MISC",
            "(start|run|turn on|activate) (my|the) (morning|bedtime|movie|dinner|leaving home|good night|focus|party)"
            " (routine|scene|mode)",
            "how (long will it take|far is it|long is the drive) to (get to work|get home|the airport|$CITIES)",
            "(what's the score of|who won|when is) the $TEAMS game[ $day]",
            "(how do you spell $WORDS|what does $WORDS mean|define $WORDS|what's the meaning of $WORDS"
            "|what's another word for $WORDS)",
            "(find|search for|look up|show me) (a recipe for|how to make) $RECIPES",
            "(find|show me|where's|directions to) the nearest $PLACES",
            "(what are the hours for|when does) the $PLACES[ (open|close)]",
        ))

    def banking(self) -> str:
        return self.t(self.c(
            "(transfer|send|move|wire) $amount (to|into) $account",
            "(transfer|send|pay|wire) $amount to $name",
            "(transfer|move) $amount from (my|the) $ACCOUNTS (account|) to (my|the) $ACCOUNTS[ account]",
            "pay $name $amount[ for (the|my) $BILLS]",
            "(pay|schedule a payment for) (my|the) $BILLS[ $when]",
            "(split|share) (the bill|the check|dinner|the rent) with $name",
            "(request|ask for) $amount from $name[ for (the|my) $BILLS]",
            "(what's|what is|check|tell me) my $ACCOUNTS (balance|account balance)",
            "how much (money do i have|is) in my $ACCOUNTS[ account]",
            "(did $name (pay|send|transfer)|has $name (paid|sent)) (me|the money|the rent)[ $past_day]",
            "(show me|read me|what were) my (last|latest|recent) $few (transactions|payments|deposits)",
            "(how much did i spend|what did i spend) on $SPENDING $period",
            "(set|change) my (budget|spending limit) for $SPENDING to $amount",
            "(cancel|stop) the (payment|transfer) to $name",
        ), account=lambda: self.t("((my|the) $ACCOUNTS[ account]|$name)"),
            few=lambda: cardinal(self.n(2, 20)),
            period=lambda: self.c("this month", "last month", "this week", "last week", "this year", "today",
                                  "yesterday", "in " + V.MONTHS[self.n(0, 11)]))

    def history(self) -> str:
        """Statements and questions about years: built, born, founded, released ..."""
        return self.t(self.c(
            "(it|the house|the bridge|the church|the school|the building|this place|the tower) was "
            "(built|finished|opened|renovated|designed|sold|rebuilt) in $year",
            "(he|she|my grandfather|my grandmother|my dad|my mom|the author|the singer) was born in $year",
            "(the company|the band|the city|the club|the restaurant|the museum) was (founded|started|formed)"
            " in $year",
            "(the movie|the album|the song|the book|the game|the phone) (came out|was released|was published)"
            " in $year",
            "(when was|what year was) (the $LANDMARKS|the eiffel tower|the first iphone) (built|made|released)",
            "(who won|what happened|who was president) in $year",
            "(we|they|i) (got married|moved|graduated|met) in $year",
            "(play|show me) (music|songs|movies|photos|the top hits) from $year",
        ), year=lambda: self.year(1800, 2030))

    def amount(self) -> str:
        r = self.rng.random()
        cur = self.c("dollar", "dollar", "dollar", "euro", "pound")
        if r < 0.15:
            return money(0, self.n(1, 99), cur)
        units = self.c((self.n(1, 20), self.n(1, 200), self.n(100, 99_999)))
        if r < 0.55:
            return money(units, 0, cur)
        if r < 0.9:
            return money(units, self.n(1, 99), cur, and_cents=self.rng.random() < 0.6)
        return f"{cardinal(units)} {cardinal(self.n(10, 99))}"  # "five twenty" style

    # small number slots
    def small(self) -> str:
        return cardinal(self.n(1, 10))

    def num(self) -> str:
        return self.number(1, 100)

    def count(self) -> str:
        return cardinal(self.n(1, 24))

    def pct(self) -> str:
        v = self.n(0, 100) if self.rng.random() < 0.85 else f"{self.n(0, 99)}.{self.n(1, 9)}"
        return percent(v)

    def dayb(self) -> str:
        return self.day(bare=True)

    # --------------------------------------------------------- composition
    _COMMANDS = ("lights", "lights", "devices", "thermostat", "timer", "timer", "alarm", "reminder", "calendar",
                 "music", "music", "volume", "playback", "weather", "weather", "call", "message", "shopping",
                 "numbers", "numbers", "numbers", "dates", "clock", "misc", "banking", "history")

    def command(self) -> str:
        """One command or question, sometimes wrapped in a prefix and/or suffix.

        Request prefixes ("could you please") and suffixes ("for me") only wrap
        imperatives (first word a verb); discourse markers ("okay", "um") and
        "please"/"thanks" wrap anything.
        """
        s = getattr(self, self.c(self._COMMANDS))()
        imperative = s.split()[0] in V.VERBS
        if self.rng.random() < 0.35:
            pre = V.REQUEST_PREFIXES if imperative and self.rng.random() < 0.65 else V.DISCOURSE_PREFIXES
            s = f"{self.c(pre)} {s}"
        if self.rng.random() < 0.2:
            s = f"{s} {self.c(V.REQUEST_SUFFIXES if imperative and self.rng.random() < 0.6 else V.POLITE_SUFFIXES)}"
        return s

    def slot_drill(self) -> str:
        """A short command dense in open-class words: first and last names, cities, groceries, artists.

        Each such word is one entry of a long list, so the full grammar shows it only
        a few times per ten thousand sentences; these commands raise that count
        without new vocabulary (the phone-line phrases are the only new words).
        """
        return self.t(self.c(
            "(call|phone|ring|video call) $person[ ((on|at) (the|his|her|their) (home|work|office|cell|mobile)"
            " (phone|number)|on speaker|at (home|work))]",
            "(text|message|email|send a text to|send a message to) $person[ (and|or) $FIRST_NAMES]",
            "(tell|ask|remind) $FIRST_NAMES to (call|text|email) $FIRST_NAMES",
            "(did $FIRST_NAMES (call|text|write|reply|pay)|has $FIRST_NAMES (called|texted|written|replied|paid))"
            "[ $past_day]",
            "(remind me to call|schedule a call with|set up a meeting with) $person[ (on $date|$day)]",
            "(transfer|send|pay) $amount to $FIRST_NAMES",
            "(is $FIRST_NAMES (home|there|coming to dinner)|will $FIRST_NAMES (be home|be there|come to dinner"
            "|call back))[ $day]",
            "(add|put) $items (to|on) (the|my) (shopping|grocery) list",
            "(do we need|do we have|do i need) $GROCERIES[ (and|or) $GROCERIES]",
            "(remove|take|cross) $GROCERIES[ and $GROCERIES] off the list",
            "(order|buy) (some|more) $GROCERIES (and|or) $GROCERIES",
            "(what's|what is) the (weather|forecast|time|temperature) in $CITIES[ $dayb]",
            "(how far is it|how long does it take) (to|from) $CITIES[ to $CITIES]",
            "(book a flight to|find flights to|find hotels in|navigate to) $CITIES[ $day]",
            "(play|put on|shuffle) $MUSIC[ in the $ROOMS]",
        ), person="$FIRST_NAMES[ $LAST_NAMES]")

    def sentence(self) -> str:
        """An in-domain utterance (normalized), never containing the wake phrase."""
        return self._without_keyword(self._sentence)

    def _sentence(self) -> str:
        if self.slot_focus and self.rng.random() < self.slot_focus:
            return self._finish(self.slot_drill())
        r = self.rng.random()
        if r < 0.05:
            s = self.answer()
        elif r < 0.15:
            s = f"{self.command()} {self.c('and', 'and then', 'then', 'and also')} {self.command()}"
        elif r < 0.19:
            s = f"{self.answer()} {self.command()}"
        else:
            s = self.command()
        return self._finish(s)

    def keyword_sentence(self) -> str:
        """ "hey stream" alone (about 20%) or followed by an utterance."""
        r = self.rng.random()
        if r < 0.2:
            s = KEYWORD
        elif r < 0.25:
            s = f"{self.c(V.WAKE_LEADS)} {KEYWORD} {self.command()}"
        else:
            filler = self.c("", "", "", "", "um", "uh", "okay")
            s = f"{KEYWORD} {filler} {self.command() if r < 0.93 else self.answer()}"
        return self._finish(s)

    def confusable_negative(self) -> str:
        """A negative for wake-word training: no "hey stream", but similar sounds or words."""
        return self._without_keyword(self._negative)

    def _negative(self) -> str:
        r = self.rng.random()
        if r < 0.35:  # sound-alike wake phrase + command
            s = f"{self.c(V.CONFUSABLE_LEADS)} {self.command()}"
        elif r < 0.5:
            s = self.c(V.CONFUSABLE_LEADS)
        elif r < 0.8:
            s = self._confusable_sentence()
        else:  # confusable words after a command
            s = f"{self.command()} {self.c('and', 'then')} {self._confusable_sentence()}"
        return self._finish(s)

    def _confusable_sentence(self) -> str:
        return self.t(self.c(V.CONFUSABLE_SENTENCES), n=lambda: cardinal(self.n(2, 30)))

    @staticmethod
    def _finish(s: str) -> str:
        s = " ".join(s.replace("-", " ").split())
        if not is_normalized(s):
            raise AssertionError(f"TextGenerator produced a non-normalized sentence: {s!r}")
        return s

    def _without_keyword(self, make) -> str:
        """Draw from ``make`` until the result does not contain the wake phrase as words."""
        while True:
            s = make()
            if not _KEYWORD_RE.search(s):
                return s
