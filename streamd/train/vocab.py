"""Vocabulary the text generator's templates draw from (:class:`V`: rooms, devices, names, cities,
groceries, artists, confusable phrases of the wake word, ...), as data: every entry normalized
(lower-case a-z, space, apostrophe)."""

from __future__ import annotations

__all__ = ["V"]


class V:
    """Vocabulary for the templates (all normalized: lower-case a-z, space, apostrophe)."""

    ROOMS = ("kitchen", "living room", "bedroom", "master bedroom", "bathroom", "hallway", "garage", "office",
             "basement", "dining room", "kids room", "guest room", "porch", "patio", "attic", "laundry room",
             "nursery", "study", "front room", "back room", "den", "family room", "entryway", "balcony",
             "playroom", "upstairs bathroom", "downstairs bathroom", "guest bedroom", "sunroom", "workshop",
             "front yard", "back yard", "garden", "closet", "hall", "lounge", "library", "gym", "spare room")
    LIGHTS = ("lights", "lights", "light", "lamp", "ceiling light", "floor lamp", "desk lamp", "reading light",
              "light strip", "overhead lights", "lamps", "bulbs", "night light", "pendant lights", "spotlights",
              "string lights", "wall lights", "porch light")
    DEVICES = ("fan", "ceiling fan", "heater", "space heater", "air conditioner", "television", "speaker", "radio",
               "smart plug", "coffee maker", "kettle", "dishwasher", "washing machine", "dryer", "vacuum",
               "air purifier", "humidifier", "dehumidifier", "electric blanket", "sprinklers", "oven", "stove fan",
               "projector", "sound bar", "fireplace", "hot tub", "pool pump", "computer", "printer", "router",
               "christmas tree", "fountain", "towel warmer", "water heater")
    DOORS = ("front door", "back door", "garage door", "side door", "gate", "patio door", "basement door",
             "front gate", "shed", "bedroom window", "kitchen window")
    COLORS = ("red", "blue", "green", "warm white", "cool white", "daylight", "purple", "orange", "yellow", "pink",
              "teal", "soft white", "candlelight", "lavender", "turquoise", "magenta", "gold", "white", "amber",
              "sky blue", "lime green", "violet", "crimson", "a sunset color", "a relaxing color", "rainbow")
    FIRST_NAMES = ("john", "mary", "james", "patricia", "robert", "jennifer", "michael", "linda", "william",
                   "elizabeth", "david", "barbara", "richard", "susan", "joseph", "jessica", "thomas", "sarah",
                   "charles", "karen", "chris", "nancy", "daniel", "lisa", "matthew", "betty", "anthony",
                   "margaret", "mark", "sandra", "paul", "ashley", "andrew", "emily", "josh", "donna",
                   "kevin", "michelle", "brian", "carol", "george", "amanda", "tim", "melissa", "jason",
                   "deborah", "ryan", "stephanie", "jacob", "rebecca", "gary", "laura", "nick", "sharon",
                   "eric", "cynthia", "jonathan", "kathleen", "larry", "amy", "justin", "anna", "scott",
                   "olivia", "brandon", "emma", "frank", "sophia", "ben", "mia", "sam", "grace", "alex",
                   "chloe", "luis", "maria", "carlos", "sofia", "wei", "mei", "raj", "priya", "mohammed",
                   "fatima", "ahmed", "aisha", "hiroshi", "yuki", "ivan", "olga", "pierre", "claire",
                   "hans", "ingrid", "kofi", "amara", "diego", "lucia", "noah", "liam", "ethan", "ava",
                   "isabella", "lucas", "zoe", "nora", "leo", "max", "ella", "jack", "lily", "henry", "ruby",
                   "oscar", "hannah", "adam", "rachel", "peter", "julia", "tony", "kate", "steven", "helen",
                   "dennis", "joan", "walter", "alice", "victor", "diana", "owen", "fiona", "tyler", "megan")
    LAST_NAMES = ("smith", "johnson", "williams", "brown", "jones", "garcia", "miller", "davis", "rodriguez",
                  "martinez", "hernandez", "lopez", "wilson", "anderson", "taylor", "thomas", "moore",
                  "jackson", "martin", "lee", "thompson", "white", "harris", "clark", "lewis", "robinson",
                  "walker", "young", "allen", "king", "wright", "scott", "green", "baker", "adams", "nelson",
                  "hill", "campbell", "mitchell", "roberts", "carter", "phillips", "evans", "turner", "patel",
                  "nguyen", "kim", "chen", "wang", "singh", "kowalski", "murphy", "o'brien", "o'connor",
                  "mcdonald", "fischer", "schmidt", "rossi", "silva", "cohen", "tanaka", "ali")
    RELATIONS = ("mom", "dad", "mum", "grandma", "grandpa", "my wife", "my husband", "my sister", "my brother",
                 "my mother", "my father", "my son", "my daughter", "my boss", "the office", "the doctor",
                 "the dentist", "my aunt", "my uncle", "my neighbor", "my partner",
                 "the babysitter", "the plumber", "my friend", "the school", "the vet", "grandma and grandpa")
    DAY_WORDS = ("today", "tomorrow", "tonight", "this evening", "this afternoon", "this morning",
                 "tomorrow morning", "tomorrow night", "tomorrow afternoon", "next week", "on the weekend",
                 "this weekend", "the day after tomorrow", "next monday", "next tuesday", "on friday",
                 "on saturday", "on sunday", "on monday", "on wednesday", "on thursday", "every day",
                 "every morning", "every weekday", "later", "later today", "next month", "right now", "now",
                 "in the morning", "at lunch", "after dinner", "before bed", "on tuesday")
    PAST_DAY_WORDS = ("today", "yesterday", "this morning", "last night", "earlier", "this afternoon",
                      "while i was out", "an hour ago", "last week", "on monday", "yesterday evening")
    WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
    MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
              "october", "november", "december")
    TIMER_NAMES = ("pasta", "egg", "pizza", "oven", "laundry", "cookie", "rice", "tea", "workout", "nap",
                   "homework", "meditation", "bread", "roast", "chicken", "cake", "parking", "study", "potato",
                   "screen time", "break", "turkey", "steak", "soup", "coffee")
    TASKS = ("call mom", "take out the trash", "water the plants", "pick up the kids", "buy milk",
             "take my medicine", "feed the cat", "walk the dog", "pay the rent", "check the oven",
             "call the doctor", "send the report", "book the flight", "renew my passport", "pay the electric bill",
             "move the car", "charge my phone", "start the laundry", "lock the door", "bring an umbrella",
             "email john", "pick up the dry cleaning", "go to the gym", "stretch", "drink some water",
             "turn off the oven", "buy a birthday present", "call the plumber", "return the library books",
             "take the chicken out of the freezer", "check the mail", "set the table", "leave for the airport",
             "feed the fish", "cancel my subscription", "wish sarah a happy birthday", "order more coffee",
             "clean the fridge", "schedule a haircut", "text my sister", "submit my timesheet",
             "take out the recycling", "pay the credit card", "check on grandma")
    EVENTS = ("meeting", "call", "appointment", "dentist appointment", "doctor's appointment", "lunch", "dinner",
              "video call", "interview", "haircut", "yoga class", "soccer practice", "piano lesson",
              "team meeting", "one on one", "conference call", "date night", "parent teacher conference",
              "flight", "party", "birthday party", "check up", "review", "standup", "book club", "game night",
              "presentation", "workout", "coffee")
    MUSIC = ("jazz", "classical music", "rock", "some rock music", "hip hop", "country music", "pop music",
             "the beatles", "taylor swift", "beyonce", "queen", "miles davis", "bach", "mozart", "the rolling stones",
             "lo fi beats", "reggae", "blues", "ambient music", "white noise", "rain sounds", "ocean sounds",
             "kids songs", "christmas music", "the radio", "something by adele", "elton john", "bob marley",
             "some jazz", "some piano music", "metal", "folk music", "latin music", "salsa", "k pop", "disco",
             "eighties hits", "nineties rock", "top forty", "the news", "my favorites", "my liked songs",
             "bohemian rhapsody", "hey jude", "billie eilish", "ed sheeran", "frank sinatra", "nirvana",
             "the weeknd", "drake", "dolly parton", "johnny cash", "coldplay", "fleetwood mac")
    PLAYLISTS = ("workout", "chill", "dinner", "focus", "morning", "road trip", "party", "sleep", "running",
                 "study", "summer", "discover weekly", "favorites", "relax", "cooking", "rainy day",
                 "throwback", "kids", "jazz", "happy", "sunday morning", "late night")
    PODCASTS = ("the daily", "radiolab", "this american life", "the morning show", "science friday",
                "my favorite podcast", "the history podcast", "the tech show", "freakonomics", "the comedy hour")
    STATIONS = ("jazz", "classical", "country", "oldies", "hits", "public", "sports", "talk", "news", "rock",
                "kiss f m", "local")
    PLAYBACK = ("pause", "resume", "stop", "next", "next song", "skip", "skip this song", "previous",
                "previous song", "go back", "play", "play it again", "repeat", "repeat this song",
                "shuffle", "shuffle on", "shuffle off", "stop the music", "pause the music", "keep playing",
                "continue", "restart the song", "start over", "turn off repeat", "like this song",
                "i don't like this song", "play the next episode", "unpause")
    CITIES = ("new york", "london", "paris", "tokyo", "chicago", "seattle", "boston", "berlin", "sydney",
              "toronto", "denver", "austin", "miami", "dallas", "madrid", "rome", "dublin", "los angeles",
              "san francisco", "atlanta", "phoenix", "houston", "vancouver", "mexico city", "mumbai",
              "delhi", "beijing", "shanghai", "seoul", "cairo", "lagos", "nairobi", "cape town", "amsterdam",
              "brussels", "vienna", "prague", "warsaw", "stockholm", "oslo", "helsinki", "lisbon", "athens",
              "istanbul", "moscow", "bangkok", "singapore", "manila", "jakarta", "melbourne", "auckland",
              "honolulu", "anchorage", "portland", "nashville", "new orleans", "las vegas", "salt lake city",
              "minneapolis", "detroit", "philadelphia", "pittsburgh", "montreal", "edinburgh", "glasgow",
              "manchester", "birmingham", "liverpool", "buenos aires", "sao paulo", "lima", "bogota")
    GROCERIES = ("milk", "eggs", "bread", "butter", "apples", "bananas", "coffee", "paper towels", "dish soap",
                 "cheese", "yogurt", "orange juice", "chicken", "rice", "pasta", "tomatoes", "onions", "potatoes",
                 "carrots", "lettuce", "spinach", "cereal", "oatmeal", "peanut butter", "jam", "honey", "sugar",
                 "flour", "olive oil", "salt", "pepper", "toilet paper", "shampoo", "toothpaste", "batteries",
                 "light bulbs", "trash bags", "laundry detergent", "cat food", "dog food", "diapers", "wipes",
                 "ice cream", "cookies", "chips", "salsa", "avocados", "lemons", "limes", "garlic", "ground beef",
                 "salmon", "tofu", "beans", "soup", "tea", "sparkling water", "beer", "wine", "grapes",
                 "strawberries", "blueberries", "broccoli", "mushrooms", "bagels", "tortillas", "cream cheese",
                 "sour cream", "almond milk", "granola", "frozen peas", "aluminum foil", "sponges", "vitamins")
    UNIT_PAIRS = ("miles to kilometers", "kilometers to miles", "pounds to kilograms", "kilograms to pounds",
                  "cups to milliliters", "ounces to grams", "feet to meters", "inches to centimeters",
                  "degrees fahrenheit to celsius", "degrees celsius to fahrenheit", "liters to gallons",
                  "gallons to liters", "yards to meters", "acres to hectares", "meters in feet", "euros in dollars")
    HOW_MANY = ("tablespoons in a cup", "ounces in a pound", "minutes in a day", "seconds in an hour",
                "days in a year", "cups in a quart", "teaspoons in a tablespoon", "feet in a mile",
                "grams in a kilogram", "weeks in a year", "hours in a week", "days until christmas",
                "calories in an apple", "people live in canada", "steps did i take today")
    STREETS = ("main street", "oak avenue", "maple drive", "park road", "elm street", "pine lane",
               "washington boulevard", "lake shore drive", "first avenue", "second street", "broadway",
               "high street", "church road", "sunset boulevard", "river road", "hill street", "market street",
               "fifth avenue", "cedar court", "mill lane")
    ANSWERS = ("yes", "no", "yes please", "no thanks", "no thank you", "cancel", "stop", "never mind", "nevermind",
               "that's right", "correct", "nope", "yeah", "yep", "sure", "go ahead", "confirm", "cancel that",
               "stop it", "okay", "ok then", "thank you", "thanks", "repeat that", "say that again",
               "that's wrong", "no that's not what i said", "yes that's correct", "not now", "maybe later",
               "of course", "absolutely", "definitely not", "i said no", "forget it", "wait", "hold on",
               "one moment", "that's all", "that's it", "i'm done", "yes do it", "please don't", "stop talking",
               "be quiet", "that's fine", "sounds good", "perfect", "great thanks", "no stop", "cancel please",
               "yes i'm sure", "undo that", "go back", "help", "what can you do")
    MISC = ("good morning", "good night", "tell me a joke", "what's the news", "i'm leaving", "i'm home",
            "i'm going to bed", "what's new", "how are you", "thank you very much", "what's up", "tell me a story",
            "flip a coin", "roll a die", "roll two dice", "what can you do", "how's the traffic",
            "what's traffic like on the way to work", "find my phone", "where's my phone", "play a game",
            "what's my battery level", "read me the headlines", "give me my daily briefing", "turn everything off",
            "good afternoon", "let's go", "lock up", "start the car", "set the house to away mode",
            "arm the security system", "disarm the alarm system", "show me the front door camera",
            "who's at the door", "what did i miss", "what's for dinner", "how do i make pancakes")
    ACCOUNTS = ("checking", "savings", "credit card", "business", "joint", "retirement", "brokerage",
                "emergency fund", "vacation fund", "college fund", "main", "personal")
    BILLS = ("rent", "electric bill", "water bill", "phone bill", "internet bill", "gas bill", "mortgage",
             "car payment", "insurance", "credit card bill", "tuition", "dinner", "groceries", "tickets",
             "taxi", "concert tickets", "gym membership", "daycare")
    SPENDING = ("groceries", "restaurants", "gas", "coffee", "clothes", "shopping", "travel", "entertainment",
                "subscriptions", "take out", "utilities", "books", "gifts")
    LANDMARKS = ("golden gate bridge", "empire state building", "statue of liberty", "brooklyn bridge",
                 "sydney opera house", "tower bridge", "space needle", "white house", "colosseum", "taj mahal")
    TEAMS = ("yankees", "lakers", "patriots", "red sox", "warriors", "cowboys", "bulls", "giants", "arsenal",
             "chelsea", "liverpool", "real madrid", "maple leafs", "seahawks", "packers", "celtics", "dodgers",
             "cubs", "knicks", "eagles")
    WORDS = ("serendipity", "ephemeral", "ubiquitous", "necessary", "rhythm", "accommodate", "onomatopoeia",
             "photosynthesis", "algorithm", "quintessential", "definitely", "restaurant", "mischievous",
             "pronunciation", "entrepreneur", "conscientious", "wednesday", "february", "colonel", "gauge")
    RECIPES = ("chocolate chip cookies", "lasagna", "pizza dough", "thai curry", "sushi rice", "banana bread",
               "chicken soup", "tacos", "pancakes", "guacamole", "vegetable curry", "apple pie", "meatballs",
               "french toast", "fried rice", "chili", "mac and cheese", "lemonade", "hummus", "pad thai")
    PLACES = ("gas station", "pharmacy", "coffee shop", "hardware store", "post office", "grocery store", "bakery",
              "library", "museum", "pool", "bank", "hospital", "park", "gym", "bus stop", "train station",
              "parking garage", "thai restaurant", "pizza place", "car wash", "vet", "atm")
    MESSAGES = ("i'm on my way", "i'll be late", "running ten minutes late", "see you soon", "call me back",
                "dinner is ready", "love you", "happy birthday", "i'm home", "can you pick up milk",
                "where are you", "don't forget the keys", "the meeting is moved to three", "thanks for everything",
                "good luck today", "i'm stuck in traffic", "let's meet at noon", "can we talk later",
                "the kids are asleep", "bring a jacket", "i miss you", "what time is the game", "on my way home",
                "i'll call you tonight", "are you coming to dinner", "congratulations", "we need more coffee",
                "the package arrived", "leave the door unlocked", "how was your day")
    VERBS = frozenset(("activate add answer arm book brighten bring bump buy calculate call cancel change check "
                       "clear close continue convert count create decline decrease define delete deliver dial dim "
                       "disable dismiss email empty facetime fast find flip get give go hang ignore increase jump "
                       "keep lock look lower make message move mute open order pause pay phone pick play preheat "
                       "push put raise read remind remove reorder repeat replay reply reschedule reserve respond "
                       "restart resume rewind ring roll run save say schedule search send set share show shuffle "
                       "shut skip snooze spell start stop switch take tell text turn unlock unmute unpause video "
                       "wake watch transfer wire request split").split())
    REQUEST_PREFIXES = ("please", "can you", "could you", "could you please", "would you", "would you please",
                        "can you please", "i want you to", "i'd like you to", "i need you to", "go ahead and",
                        "will you", "kindly", "please just", "just", "i want to", "i'd like to", "help me",
                        "remember to", "don't forget to", "i need to", "you can", "try to")
    DISCOURSE_PREFIXES = ("okay", "um", "uh", "hey", "alright", "so", "and", "oh and", "actually", "i said",
                          "ok so", "right", "well", "now", "sorry", "excuse me", "quick question", "oh", "hmm",
                          "one more thing", "also")
    REQUEST_SUFFIXES = ("for me", "right now", "now", "for me please", "if you can", "when you get a chance",
                        "quickly", "right away", "as well", "too", "again", "please", "immediately", "real quick")
    POLITE_SUFFIXES = ("please", "thanks", "thank you", "okay", "please and thank you", "thanks a lot", "again",
                       "by the way", "then")
    WAKE_LEADS = ("okay", "um", "so", "oh", "alright", "excuse me", "hello", "yo", "and")
    CONFUSABLE_LEADS = ("hey steve", "hey string", "hey siri", "hey stranger", "hey sweetie", "hey dream",
                        "hey team", "hey stephen", "hey scream", "hey strings", 
                        "hey stella", "hey stu", "hey stan", "hey stacy", "hey trim", "hey cream", "hey steam",
                        "hey sean", "hey steven", "hey tim", "hey jim", "hey kim", "hey google", "hey you",
                        "hey there", "hey listen", "hey siri stream", "hi stream", "they stream", "the stream",
                        "a stream", "pay stream", "hey extreme", "ice cream", "okay google", "hey computer",
                        "hey strawberry", "hey street", "hey speaker", "hey sam", "hey stray", "stream", "hey",
                        "hey steam room", "hey mainstream", "hey bean", "hey jean", "hey frame",
                        "hey kristine", "hey christine", "hey upstream")
    CONFUSABLE_SENTENCES = (
        "buy some ice cream", "add ice cream to the shopping list", "i scream you scream we all scream for ice cream",
        "extreme weather warning for $dayb", "is there any extreme weather coming", "that's extreme",
        "hey string the lights on the tree", "a stream of water", "a stream of cars", "we walked along the stream",
        "the stream behind the house", "that song is pretty mainstream", "mainstream music", "the mainstream media",
        "stream the game on the television", "stream the new episode", "can i stream this", "live stream",
        "start a live stream", "the stream is buffering", "is the stream still live", "upstream", "downstream",
        "swim upstream", "the river flows downstream", "the stream keeps cutting out", "hey siri set a timer",
        "hey steve how are you", "hey steve can you help me", "hey stranger long time no see",
        "they stream movies every friday", "they stream $n hours a day", "the steam room is hot",
        "a steam engine", "steam the vegetables for $n minutes", "the dream was strange", "i had a weird dream",
        "a string of numbers", "hand me the string", "extreme sports", "the team is playing $dayb",
        "hey team great job", "hey $name", "hey $name what's up", "say hey to $name", "i scream",
        "hey there how's it going", "stream", "streaming service", "she streams on weekends", "streamline the process",
        "ice cream for dessert", "hay is stored in the barn", "the stream is frozen", "hey is for horses",
        "gulf stream", "jet stream", "bloodstream", "the jet stream is moving south", "extreme heat warning",
        "hey stephen call me", "hey sweetie dinner's ready", "hey mom", "the screen is frozen", "clean the screen",
        "hey there stranger", "stranger things", "a strong stream", "streamer", "screen time is over",
        "this stream has $n viewers", "a steady stream of customers", "dream team", "cream cheese")
