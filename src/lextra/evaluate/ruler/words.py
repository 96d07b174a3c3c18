"""The built-in word list of the RULER tasks: keys of the needles (`word-word`) and the words of `cwe`.

Generated offline from the `english` corpus (Shakespeare and the King James Bible) by `corpus_words`: every
lowercase word of 4 to 10 letters that occurs at least 5 times, sorted. RULER (Hsieh et al. 2024, arXiv 2404.06654)
draws the same roles from the `wonderwords` lists; a list of our own keeps the suite offline and dependency-free.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Sequence

from lextra.data import Document

#: a lowercase word not glued to other letters or an apostrophe (so "o'er" and "Lord" are not words here)
WORD = re.compile(r"(?<![A-Za-z'])[a-z]+(?![A-Za-z'])")


def corpus_words(docs: Sequence[Document], min_count: int = 5, shortest: int = 4, longest: int = 10) -> list[str]:
    """The sorted words of `docs` with `shortest`..`longest` letters occurring at least `min_count` times."""
    counts = collections.Counter(word for doc in docs for word in WORD.findall(doc.text))
    return sorted(w for w, n in counts.items() if n >= min_count and shortest <= len(w) <= longest)


_TEXT = """
abase abate abated abbess abbey abhor abhorred abhorreth abide abides abideth abiding abilities ability abject able
aboard abode abolished abominable abound abounded about above abroad absence absent absolute abstain abstinence
abstract abundance abundant abundantly abuse abused abuses accent accents accept acceptable acceptance accepted
access accessary accident accidents accompany accomplish accord according account accounted accursed accusation
accuse accused accusers ache aches achieve achieved acquaint acquainted acquit acres across acted acting action
actions active actor actors acts adamant adan added adder adders addeth adding addition additions address adds adieu
adjunct adjure admirable admiration admire admired admiring admit admits admittance admitted admonished admonition
adopted adoption adore adorn adorned adulterate adulterers adulteress adulteries adulterous adultery advance
advanced advantage advantages adventure adversary adverse adversity advice advise advised advisedly advocate afar
afeard affable affair affairs affect affected affection affections affects affirm afflict afflicted affliction
afford affords affright affrighted afoot afore aforetime afraid afresh after afternoon afterward afterwards again
against agate aged agent ages aggravate agony agree agreed agreement agrees ague aileth aims airs airy alabaster
alack alarm alarum alarums alas albeit alehouse alien alienated alike alive allay allegiance alliance allied allies
allow allowance allowed allure almighty almonds almost alms aloes aloft alone along aloof aloud already also altar
altars alter alteration although altogether alway always amain amaze amazed amazement ambassador amber ambition
ambitious ambush amen amend amended amends amiable amiss amity among amongst amorous amount ample ancestors anchor
anchors ancient ancients anew angel angels anger angle angry anguish animals annoy annoyance annual anoint anointed
anointing anon another answer answered answereth answering answers ante antic antique antiquity anything anywhere
apace apart apes apiece apish apology apostle apostles apothecary apparel apparent apparition appeal appear
appearance appeared appeareth appearing appears appease appellant appetite applaud applause apple apples applied
apply appoint appointed apprehend approach approaches approve approved aprons aptly aqua aram arba arbitrate arch
archbishop archer archers arches argosy argues argument arguments aright arise ariseth arithmetic armed armies
armour armourer armoury arms army arose arraign arrant arras array arrayed arrest arrested arrival arrive arrived
arrogance arrogancy arrow arrows article articles artificial artillery arts ascend ascended ascending ascent ashamed
ashes ashore aside asked asketh asking asleep aspect aspects aspire aspiring assault assay assemble assembled
assemblies assembly asses assist assistance assume assurance assure assured assuredly astonied astonished astray
asunder athirst athwart atone atonement attach attain attained attaint attempt attempts attend attendance attendant
attendants attended attending attends attention attentive attire attired attorney attribute audacious audience audit
aught aunt auspicious austere author authority authors autumn avaunt aven avenge avenged avenger avoid avoided
avouch awake awaked aware away awful awhile awoke awry axes baal babbling babe babes baby bachelor back backs
backward bade badge badgers badness baggage bags bail bait baited bake baked baken baker balance balances bald
baldness baleful ball ballad ballads balls balm band bands bandy bane banish banished banishment bank bankrupt banks
banner banners banquet baptism baptize baptized barbarous bare barefoot bargain barge bark barks barley barn barnea
barns barons barren bars base basely baseness baser bases basest bashful basin basis basket baskets bason basons
bastard bastards bastardy bate bated bath bathe baths battering battery battle battles bauble bawd bawds bawdy beach
beacon beadle beads beam beams bear beard bearded beards bearer bearers bearest beareth bearing bears beast beastly
beasts beat beaten beating beats beauteous beauties beautiful beautify beauty beaver became because beck beckoned
beckons become becomes becometh becoming bedchamber bedfellow beds beef been beer bees beest beetle beeves befall
befallen befell befits before beforehand beforetime befriend began begat beget begets beggar beggarly beggars
beggary begged begging begin beginning beginnings begins begot begotten begs beguile beguiled begun behalf behave
behaved behaviour behaviours beheaded beheld behind behold beholders beholdest beholding being belie belied belief
believe believed believest believeth believing belike bell bellows bells belly belong belonged belongeth belonging
belongs beloved below bemoan bench bend bended bending beneath benefit benefits bent bequeath bereave bereaved
bereft berries beryl beseech beseem beseeming beset beshrew beside besides besiege besieged besought bespeak best
bestow bestowed bestowing bestows bestrid bestride betake bethink bethought betide betimes betray betrayed betrothed
better betters between betwixt bewail beware bewitched bewray beyond bias bidden bidding bide bids bier bigger bill
billow billows bills bind bindeth binding bird birding birds birth birthright births bishop bishops bite bites
biting bits bitten bitter bitterly bitterness black blacker blackness blade blame blamed blameless blank blanks
blaspheme blasphemed blasphemy blast blasted blasting blasts blaze blazon bleak bleed bleeding bleeds blemish
blemishes blench bless blessed blesseth blessing blessings blest blew blind blinded blindness bliss blister blithe
block blocks blood blooded bloodless bloods bloody blossom blossoms blot blots blotted blow blowing blown blows blue
blunt blush blushes blushing boar board boarded boards boast boasting boat boats bode bodes bodies bodily boding
body boil boiled boisterous bold bolder boldly boldness bolster bolt bolted bolts bond bondage bondman bondmen bonds
bondwoman bone bones bonnet bonnets bonny book books boon boot booths bootless boots booty border borders bore born
borne borrow borrowed bosheth bosom bosoms both bottle bottles bottom bottomless bough boughs bought bound boundless
bounds bounteous bounties bountiful bounty bourn bout bowed bowels bower bowing bowl bowls bows boys brace bracelet
bracelets brach brag braggart bragging brags brain brains brake brakest bran branch branches brand brands brasen
brass brat brave bravely braver bravery braving brawl brawling brawls brawn brazen breach breaches bread breadth
break breaker breaketh breakfast breaking breaks breast breasts breath breathe breathed breathes breathing
breathless breaths bred breeches breed breeder breeding breeds brethren brew bribe bribes brick bricks bridal bride
bridegroom bridge bridle brief briefly brier briers bright brightness brim brimstone brine bring bringest bringeth
bringing brings brink brittle broached broad broidered broil broils broke broken broker brooch brood brook brooks
broth brothel brother brotherly brothers brought broughtest brow brown brows bruise bruised bruising bruit brutish
bubble buck buckle buckled buckler bucklers buckram budded budge buds buffet buffets build builded builders buildest
buildeth building buildings builds built bulk bull bullets bullock bullocks bulls bully bulwarks bunches bundle
burden burdens burial buried burn burned burneth burning burns burnt burst burthen bury burying bush bushes busied
business busy butcher butchers butler butt butter buttock buttocks buyer buys buzz buzzing byword cabin cage caitiff
cake cakes calamity caldron calendar calf call called calleth calling calls calm calumny calves came camel camels
camest camp camps canary candle candles canker cankerworm cannon cannot canon canopy canst capable capacity cape
caper capital capon caps captain captains captive captives captivity carbuncle carcase carcases card cardinal care
cared career careful carefully careless carelessly cares careth cargo carnal carpenter carpenters carriage carriages
carried carries carrion carry carrying cart carve carved case casement cases casket caskets cast casteth casting
castle castles catch catches catching cates cats cattle caught caul cause caused causes causeth caution cave caves
cavil cease ceased ceases ceaseth ceasing cedar cedars celebrate celerity celestial cell censer censers censure
censured centre centurion ceremonies ceremony certain certainly certainty certify chafe chafed chaff chain chains
chair chairs challenge challenged challenger chamber chambers champion chance chanced chancellor chances change
changeable changed changeling changes changing channel channels chapel chapiter chapiters chaps character characters
charge chargeable charged charger charges chariot chariots charitable charity charm charmed charming charms charter
chase chased chaste chasten chastened chasteneth chastening chastise chastised chastity chat cheap cheater check
checks cheek cheeks cheer cheerful cheerfully cheerly cheers cheese cherish cherry cherub cherubims cherubin chest
chests chew cheweth chid chide chides chiding chief chiefest chiefly child childhood childish childless children
chimney chin chink chivalry choice choke choked choler choleric choose chooseth chop chose chosen chronicle
chronicles chuck church churches churchman churchmen churchyard churl churlish cinders cipher circle circled circuit
circumcise cistern citadel cited cities citizen citizens city civil civility clad claim claims clamorous clamour
clamours clap clapped clapper claps clave claw claws clay clean cleanly cleanness cleanse cleansed cleansing clear
clearer clearly clears cleave cleaveth cleft clefts clerk clerks cliff climate climb climbing clime clip cloak
cloaks clock clods clog cloister cloke close closed closely closet closing cloth clothe clothed clothes clothing
cloths cloud clouded clouds cloudy clout clouts cloven clown club clubs cluster clusters coach coal coals coast
coasts coat coats cock cockatrice cockle codpiece coffer coffers coffin coil coin cold colder coldly collected
collection college colors colour coloured colours colt colts combat combatants combine come comedy comeliness comely
comes comest cometh comfort comforted comforter comforters comforteth comforts coming command commanded commander
commanders commandeth commanding commands commence commend commended commends comment commission commit commits
committed committeth committing commodity common commonly commons commonweal commotion commune communed compact
companies companion companions company compare compared comparison compass compassed compasseth compassing
compassion compel compelled complain complaint complaints complete complexion complices compliment compound
compounded compounds comprehend compulsion conceal concealed concealing conceit conceited conceits conceive
conceived conception concern concerning concerns conclude concluded concludes conclusion concord concubine
concubines condemn condemned condition conditions conduct conducted conduit confer conference confess confessed
confessing confession confessor confidence confident confine confines confirm confirmed confiscate conflict confound
confounded confounds confused confusion congealed conjure conjurer conquer conquered conquering conqueror conquerors
conquest conscience consecrate consent consented consenting consents consider considered consist consort consorted
conspiracy conspire conspired constable constancy constant constantly constraint construe consul consuls consult
consulted consume consumed consuming contagion contagious contain contained containing contains contemned contempt
contend contended contending content contented contention contents continent continual continue continued continues
continueth continuing contract contracted contradict contraries contrary contrite contrive control convenient
converse convert converted convey conveyance convince convoy cony cook cool cooling cools cope copper copulation
copy coral cord cordial cords cormorant corn corner corners cornet cornets coronation coronet corporal corpse
correct correction corrupt corrupted corruption corse cost costard costly cote cottage couch couched could couldest
couldst council councils counsel counsellor counsels count counted counter counties countries country countryman
countrymen counts county couple coupled couples coupling courage courageous course courses court courteous
courtesies courtesy courtier courtiers courtly courts courtship cousin cousins covenant covenants cover covered
covereth covering covers covert covet covetous coward cowardice cowardly cowards coxcomb cozen cozened crab crack
cracking cracks cradle craft craftiness craftsmen crafty cram crammed crave craves cream create created creation
creature creatures credit creditor creditors credulous creep creepeth creeping creeps crept crest crew crickets
cried cries criest crieth crime crimes crimson cripple crocodile crooked crop cross crossed crosses crow crown
crowned crowns crows crucified crucify cruel cruelly cruelty cruse crush crushed crutch crying crystal cubit cubits
cuckold cuckoo cudgel cuff cull cunning cunningly cups curb cure cured curer cures curious curiously curled current
currish curs curse cursed curses curseth cursing curst curtain curtains curtsy cushion cushions custody custom
customary customs cuts cutteth cutting cymbals cypress dagger daggers daily dainties dainty dale dalliance dally
damage damask dame dames damn damnable damnation damned damsel dance danced dances dancing danger dangerous dangers
dank dare dares darest daring dark darken darkened darkly darkness darling dart darts dash dashed dastard date
daubed daughter daughters dawning daws daylight days daytime dead deadly deaf deal dealeth dealing dealings deals
dealt dear dearer dearest dearly dearth death deaths debate debating debt debtor debtors debts decay decayed decays
decease deceased deceit deceitful deceits deceive deceived deceiver deceiveth deceiving decision deck decked declare
declared decline declined declining decree decreed decrees dedicate dedicated dedication deed deeds deem deep deeper
deepest deeply deeps deer deface defeat defect defects defence defenced defend defendant defended defiance defied
defile defiled defileth deformed deformity defy degenerate degree degrees deign deity dejected delay delays
deliberate delicate delight delighted delighteth delightful delights deliver delivered deliverer delivereth
delivering delivers delivery demand demanded demands demi denial denied denies denote dens deny denying depart
departed departeth departing departure depend depending depends depose deposed depth depths deputation deputy
derision derive derived descend descended descending descent describe descried descry desert deserts deserve
deserved deserves deserving deservings design designs desire desired desires desirest desireth desiring desirous
desolate desolation despair despairing despatch desperate despise despised despiseth despite despiteful destiny
destitute destroy destroyed destroyer destroyers destroyeth destroying detain detect determine determined detest
detestable detested device devices devil devilish devils devise devised deviseth devoted devotion devour devoured
devoureth devouring devout dews dexterity diadem dial dialogue diamond diamonds dice didst died dies diest diet
dieted dieth difference different digest digested digestion digged dignified dignities dignity diligence diligent
diligently diminish diminished dine dined dinner dipped dire direct directed direction directions directly direful
dirt dirty disallowed disaster discarded discern discharge discharged disciple disciples discipline disclose
discomfort discontent discord discourse discourses discover discovered discovers discovery discreet discretion
disdain disdained disdainful disdains disease diseased diseases disfigure disgrace disgraces disguise disguised dish
dishes dishonest dishonesty dishonour dislike disloyal dismal dismay dismayed dismiss dismissed disorder dispatch
dispense disperse dispersed displease displeased dispose disposed disposing dispossess dispraise disputed disputing
disquieted dissemble dissembled dissension dissolve dissolved dissuade distaff distance distant distemper distil
distinctly distract distracted distress distressed distresses distribute distrust disturb ditch ditty dive divers
diverse divide divided divideth dividing divination divine diviners divining divinity division divisions divorce
divorced doctor doctors doctrine doctrines doer doers does doest doeth doff dogs doigts doing doings doit dole
doleful dolour domestic dominion dominions done doom doomsday door doors dost dotage dote doted dotes doth doting
double doubled doublet doubly doubt doubted doubtful doubting doubtless doubts dough dove doves dower down downfall
downright downward dowry dozen drab drag dragging dragon dragons dram drams drank draught drave draw drawer drawers
draweth drawing drawn draws dread dreaded dreadful dream dreamed dreamer dreaming dreams dreamt dregs drench dress
dressed drew dried drift drink drinketh drinking drinks drive driven drives driveth driving drone droop drooping
drop dropped dropping drops dross drought drove drown drowned drowning drowns drowsy drudge drugs drum drums drunk
drunkard drunkards drunken ducat ducats duchess duck dues duke dukedom dukedoms dukes dulcet dull duller duly dumb
dumbness dumps dung dungeon dunghill durance during durst dusky dust duteous duties duty dwarf dwarfish dwell
dwelled dwellest dwelleth dwelling dwellings dwells dwelt dyed dying each eager eagle eagles earl earldom earls
early earn earned earnest earnestly earring earrings ears earth earthen earthly earthquake earthy ease easier easily
east eastern eastward easy eaten eater eateth eating eats ebbs echo eclipse eclipses ecstasy edge edges edict
edified edifying edom education effect effected effects effectual effeminate eggs eight eighteen eighteenth eighth
either elbow elder elders eldest elect election element elements eleven eleventh eloquence eloquent else elsewhere
elves embassage embassy embrace embraced embracing emerald emerods eminence eminent emperor empery empire employ
employment empress emptied empty emulation encamp encamped enchanted enchanting enclosed encounter encounters
encourage encouraged endeavour endeavours ended ending endless ends endued endure endured endureth enemies enemy
enforce enforced engaged engenders engine engines engravings enjoined enjoy enjoying enjoys enlarge enlarged enmity
enough enow enquire enquired enraged enrich enriched enrolled ensign ensue ensues ensuing entangled enter entered
entereth entering enterprise enters entertain entice entire entirely entrails entrance entrap entreat entreated
entreaties entreats entreaty entry envied envious envy envying ephah ephod epilogue epistle epitaph equal equally
equals equity ergo errand erred erring error errors erst escape escaped escapeth especially espied espoused espy
esquire establish estate estates esteem esteemed esteemeth esteems estimate estimation estranged eternal eternity
eunuch eunuchs even evening event eventide events ever evermore every everything everywhere evidence evident evil
evildoers evils ewer ewes exact exactly exalt exalted exalteth examine examined example examples exceed exceeded
exceeding exceeds excel excellence excellency excellent excels except excepted exceptions excess exchange exchequer
exclaim exclaims excrement excursions excuse excused excuses execute executed executeth executing execution exempt
exercise exercised exercises exeunt exhibition exhort exile exit expect expected expecting expedient expedition
expel expense experience expert expire expired exploit exploits exposition expound expounded express expressed
expressly exquisite extant extempore extend extended extent extenuate external extol extreme extremes extremest
extremity eyeballs eyed eyeless eyelids eyes eyesight eyne ezer fables face faced faces fact faction factions
factious faculties fade fadeth fading fail failed faileth failing fails fain faint fainted fainting faintly faints
fair fairer fairest fairies fairly fairs fairy faith faithful faithfully faithless faiths falchion falcon fall
fallen falleth falling fallow falls false falsehood falsely fame familiar families family famine famish famous
fancies fancy fantastic fantasy fardel fare fares farewell farm farther farthest farthing fashion fashioned fashions
fast fasted fasten fastened faster fasting fatal fate fates father fatherless fathers fathom fathoms fatlings
fatness fatted fault faultless faults faulty favor favour favourable favoured favourites favours fawn fawning fealty
fear feared feareth fearful fearfully fearing fears feast feasted feasting feasts feat feather feathers feats
feature feeble feed feeder feedeth feeding feeds feel feeling feelingly feels feet feign feigned feigning fell
fellow fellows fellowship felt female fence fenced fertile fervent festival fetch fetched fetters fever fickle field
fields fiend fiends fierce fierceness fiery fife fifteen fifteenth fifth fifties fifty fight fighting fights figs
figure figures file files fill filled filleth fillets filling fills filth filthiness filthy find findeth finding
finds fine finely finer fines finest finger fingers fingres finish finished fins fire fires firm firmament firmly
first firstborn firstling firstlings fish fishermen fishers fishes fist fitly fitness fits fitted fitter fitting
five fixed flag flags flame flames flaming flanks flap flat flatter flattered flatterer flatterers flattereth
flatteries flattering flatters flattery flaw flax flea fled flee fleece fleet fleeth fleeting flesh fleshhooks flew
flies flieth flight fling flint flinty flock flocks flood floods floor flour flourish flout flow flower flowers
floweth flowing flown flows flung flying foam foaming foes foil foils foison fold folded folds folk folks follies
follow followed follower followers followeth following follows folly fond fondly food fool foolery fooling foolish
foolishly fools foot footed footing footman footmen footsteps footstool forasmuch forbad forbear forbid forbidden
forbids force forced forces forcing ford fore forefront forehead foreheads foreign foremost forepart foresaid
foresee foreskin foreskins forest forester forests foretold forever forfeit forfeited forfeiture forfend forgat
forgave forge forged forget forgetful forgive forgiven forgo forgot forgotten forked forlorn form formal formed
former formerly forms forsake forsaken forsaketh forsook forsooth forswear forswore forsworn fort forth forthwith
fortified fortify fortitude fortnight fortress forts fortunate fortune fortunes forty forward fought foul fouler
foulness found foundation founded founder fountain fountains four fourscore foursquare fourteen fourteenth fourth
fowl fowls foxes fragments fragrant frail frailty frame framed frank frankly frantic fraud fraught fray free freed
freedom freely freer freewill freeze frenzy frequent fresh fresher freshly fret frets fretted fretting friar friend
friendly friends friendship fright frighted frights frogs from front frost frosts frosty froth froward frown
frowning frowns frozen fruit fruitful fruits frustrate fuel fugitive fulfil fulfilled full fuller fully fulness
fulsome function functions funeral furbished furious furlongs furnace furnish furnished furniture furrows further
furthest fury future gage gain gained gains gainsay gait gall gallant gallants galled gallery galleys gallop gallows
galls game gamester gaol gaoler gape gaping garb garden gardens garland garlands garment garments garnished garrison
garrisons garter gartered gash gashes gasp gate gates gather gathered gathereth gathering gaudy gaunt gave gavest
gaze gazes gazing gear gedi geese gender genealogy general generally generals generation generous genius gentle
gentleman gentlemen gentleness gentler gentles gently gentry gerahs gesture gets getteth getting ghastly ghost
ghostly ghosts giant giants giddy gift gifts gild gilded gilead gilt ginger gins gird girded girdle girdles girl
girls girt give given giver gives givest giveth giving glad gladly gladness glance glass glasses glean gleaned
gleaning glittering globe glories glorified glorify glorious glory gloss glove gloves glow glowing glutton gnashing
gnat gnats gnaw goat goats goblins goddess godliness godly gods goes goest goeth going goings gold golden goldsmith
gone good goodliest goodly goodman goodness goods goose goot gore gorge gorgeous gospel gossip gossips gotten gourd
gout govern governed government governor governors gown gowns grace graced graceful graceless graces gracious
graciously graff graffed grafted grain grand grandam grandsire grant granted grape grapes grapple grass grate
gratify gratis grave gravel graven graver graves gravity gray graze grease greasy great greater greatest greatly
greatness greediness greedy green greet greeting greetings greets grew grey greyhound greyhounds grief griefs
grievance grievances grieve grieved grieves grieving grievous grievously grim grin grind grinding gripe grisled
groan groaning groans groat groats groom grooms grope gross grosser grossly grossness ground grounded grounds grove
groves grow groweth growing grown grows growth grudge guard guarded guards guess guest guests guide guided guides
guiding guile guilt guiltiness guiltless guilty gulf gull gushed gust gusts guts gyves habit habitation habited
habits hack hadad hadst hail hailstones hair hairs hairy hale half hall hallow hallowed halt halter halting hammer
hammers hanan hand handed handful handfuls handle handled handling handmaid handmaids hands handsome hang hanged
hanging hangings hangman hangs hapless haply happen happened happeneth happier happily happiness happy haps harbour
hard harden hardened harder hardly hardness hardy hare hark harlot harlots harm harmful harmless harmony harms
harness harp harps harsh hart harvest hast haste hasted hasten hastened hasteth hastily hasty hatch hatches hate
hated hateful hates hatest hateth hath hating hatred hats hattaavah haughty haunt haunted haunts have haven having
havoc hawk hawks hawthorn hazard hazel head headed headlong heads headstrong heady heal healed healeth healing
health healthful heap heaps hear heard heardest hearer hearers hearest heareth hearing hearken hearkened hears
hearse heart hearted hearth heartily hearts hearty heat heated heath heathen heave heaved heaven heavenly heavens
heavier heaviest heavily heaviness heavy hedge hedges heed heedful heel heels heifer heigh height heinous heir heirs
held hell hellish helm helmet helmets help helped helper helpers helping helpless helps hemlock hence henceforth
herald heraldry heralds herb herbs herd herdmen herds here hereafter hereby hereditary herein hereof heresies heresy
heretic heretofore heritage hermit herring hers herself hewed hewers hewn hidden hide hideous hides hidest hideth
hiding hies high higher highest highly highness highway highways hilding hill hills hilts himself hind hinder
hindered hindmost hinds hint hips hire hired hireling hiss hissing history hither hitherto hitherward hits hive hoar
hoarse hoary hobby hogshead hold holden holdest holdeth holding holds hole holes holiday holiness hollow holp holpen
holy homage home homely homer homeward honest honester honestly honesty honey honeycomb honor honorable honors
honour honourable honourably honoured honoureth honours hood hoof hoofs hook hooks hoop hope hoped hopeful hopeless
hopes hoping horn horns horon horrible horribly horrid horror horse horseback horsemen horses hose host hostages
hostess hostile hosts hotly hotter hound hounds hour hourly hours house household households houses housetop
housetops housewife hovel howbeit howl howling howsoever huge human humane humanity humble humbled humbleness
humbleth humbly humility humor humorous humour humours hundred hundreds hung hunger hungred hungry hunt hunted
hunter hunters hunting hurl hurried hurt hurts husband husbandman husbandmen husbandry husbands hush husks hymn
hymns hypocrisy hypocrite hypocrites hyssop idiot idle idleness idly idol idolaters idolatry idols ignoble ignorance
ignorant ills image images imaginary imagine imagined imitate immaculate immediate imminent immodest immortal impart
impatience impatient impeach impediment imperfect imperial imperious impiety impious implore import importance
important importing imports importune impose imposition impossible impotent impress impression impudent imputation
impute imputed inasmuch incense incensed incertain incessant incest incestuous inch inches incision incline inclined
inclining inclosed inconstant increase increased increaseth increasing incur incurable indeed indignity indirect
indirectly industry infallible infamy infancy infant infants infect infected infection infectious inferior infidel
infinite infinitely infirmity inflame influence inform informed infringe ingenious ingrateful inhabit inhabitant
inhabited inherit inherited inheritor inhuman iniquities iniquity injuries injurious injury injustice inkhorn inland
inner innocence innocency innocent innocents inordinate inquire inside insinuate insolence insolent insomuch
instance instances instant instantly instead instinct instruct instructed instrument insulting integrity intend
intended intending intends intent intents interest interim interpret interrupt interview into intreat intreated
invaded invent invention inventions inventory invest invincible invisible invite invited inward inwardly inwards
iron irons island islanders islands isle isles issue issued issues itch itself ivory jack jade jades jars jasper
javelin jaws jealous jealousies jealousy jearim jeopardy jerkin jest jester jesting jests jewel jewels jocund join
joined joint jointly joints jointure jollity jolly journey journeyed journeys joyful joyfully joyous joys jubile
judah judge judged judgement judges judgest judgeth judging judgment judgments juggling juice jump jumps just
justice justices justified justify justly juvenal keen keep keeper keepers keepest keepeth keeping keeps kennel kept
kerns keys kick kidneys kids kill killed killeth killing kills kind kinder kindle kindled kindly kindness kindred
kindreds kinds kine king kingdom kingdoms kingly kings kinsman kinsmen kinswoman kiss kissed kisses kissing kitchen
kite kites knave knavery knaves knavish knee kneel kneeled kneeling kneels knees knell knew knewest knife knight
knighthood knightly knights knit knives knock knocking knocks knop knops knot knots know knowest knoweth knowing
knowledge known knows labour laboured labourers laboureth labouring labours lace lack lacked lacketh lackey lacking
lacks ladder laden ladies lading lads lady ladyship laid lain lake lamb lambs lame lament lamentable lamented
lamenting laments lamp lamps lance lances land landed lands lane language languages languish lantern lanthorn
lapwing large larger largess lark lascivious lass last lasting lastly late lately latest lath latter lattice laud
laugh laughed laughing laughs laughter laver lavers lavish lawful lawfully lawgiver lawless laws lawyer lawyers
layeth laying lays lazy lead leaden leader leaders leadeth leading leads leaf league leagues lean leaned leaning
leanness leans leap leaped leaping learn learned learning lease least leather leathern leave leaven leavened leaves
leaveth leaving lechery lecture leddest ledges leek leeks leer lees left legacy legate legions legitimate legs lehem
leisure lend lendeth lends length lengthen lenity lent leopard leper lepers leprosy leprous less lesser lesson lest
lethargy lets letter letters letting level leviathan levied levity levy lewd lewdness liable liar liars liberal
liberality liberties liberty lice licence license lick licked lied lief liege lien liers lies liest lieth lieu
lieutenant life lifeless lift lifted lifteth lifting light lighted lighten lightened lightens lighter lightly
lightness lightning lightnings lights like likelihood likely liken likened likeness likes likewise liking lilies
lily limb limbs lime limit limited limits line lineal lineaments linen lines linger lingering link lion lioness
lions lips liquid liquor list listen listening lists litter little live lived lively liver liveries livers livery
lives livest liveth living load loaden loam loath loathe loathed loathes loathsome loaves lock locked locks locust
locusts lodge lodged lodges lodging lofty logs loins long longed longer longest longing longs look looked looketh
looking looks loops loose loosed lord lordly lords lordship lose loses losing loss losses lost lots loud louder
lousy lout love loved lovedst lovely lover lovers loves lovest loveth loving lower lowest lowliness lowly loyal
loyalty luck lucky lucre luggage lullaby lump lunacy lunatic lungs lurk lurking lust lusteth lustful lustre lusts
lusty lute luxury lying maachah mace madam madame madcap made madest madly madman madmen madness madonna magic
magician magicians magistrate magnified magnify maid maiden maidenhead maidens maids maim maimed main maintain
majestical majesty make maker makers makes makest maketh making malady male males malice malicious malignant malt
manage mandrakes mangled manhood manifest manifested manifold mankind manly manna manner mannerly manners manservant
mansion mantle many marble march marches marching mare margent mariners mark marked market markets marks marred
marriage marriages married marrow marry marrying marshal mart martial martyr marvel marvelled marvellous mask masked
masons masque mass massacre massy mast master masters match mate mated material mates matrix matter matters mattock
mature mayest mayor mayst meads meagre meal meals mean meaner meanest meaneth meaning means meant meantime measure
measured measures measuring meat meats meddle meddling mediator medicine medicines meditate meditating meditation
medlar meed meek meekness meet meeting meets melancholy melech mell melodious melody melt melted melteth melting
member members memorial memory mend mended mending mention mentioned meon merchant merchants mercies merciful
merciless mercy mere merely merit merited merits mermaid merrier merrily merriment merry mess message messenger
messengers metal mete meteors methinks method methought mettle mice mickle middle midnight midst midwife midwives
might mightest mightier mightiest mightily mightiness mightst mighty milch mild mildew mildly mildness mile miles
military milk mill million millions millstone millstones mince mincing mind minded mindful minds mine mines mingle
mingled minion minions minister ministered ministers ministry minority minstrels mint minute minutes miracle
miracles mire mirror mirth miry miscarried miscarry mischance mischief mischiefs misdoubt miserable miseries misery
misfortune misled misprision miss missing mist mistake mistaken mistaking mistook mistress mistresses mistrust misty
misuse mitre mixed mixture moab moan moans mock mocked mocker mockers mockery mocketh mocking mocks model moderate
modern modest modestly modesty moiety moist mole molten moment momentary monarch monarchs monarchy money moneys
mongrel monk monkey monkeys monsieur monster monsters monstrous month months monument monuments mood moods moody
moon moonlight moons moonshine moral more moreover morn morning morrow morsel mortal mortality mortals morter most
mote moth mother mothers motion motions motive motives motley mots mould moulded mouldy mount mountain mountains
mounted mounting mounts mourn mourned mourner mourners mourneth mournful mourning mouse mouth mouths move moved
moves moveth moving much muddy muffled mulberry mule mules multiplied multiply multitude multitudes murder murdered
murderer murderers murdering murderous murders murmur murmured murmuring murmurings murther muse music musical
musician musicians musick musk must mustard muster musters musty mute mutinies mutinous mutiny mutter mutton mutual
muzzle myrrh myrtle myself mysteries mystery nail nails naked nakedness name named namely names napkin napkins
narrow narrowly nation nations native nativity natural naturally nature natures naught naughty navel navy near
nearer nearest nearly neat necessary necessity neck necks need needed needeth needful needle needless needlework
needs needy neglect neglected negligence negligent nego neigh neighbour neighbours neighing neither nephew nephews
nerves nest nests nether nets nettle nettles network never newer newest newly news next nice nicely nick niece
niggard nigh night nightgown nightly nights nimble nine nineteen ninety ninth nobility noble nobleman nobleness
nobler nobles noblest nobly nobody nods noise noised noisome none nonny nonpareil noon noonday noontide north
northern northward nose noses nostrils notable note noted notes nothing notice notorious nought nourish nourished
number numbered numbers nuncle nunnery nuptial nurse nursed nursery nursing nuts nymph nymphs oaks oars oath oaths
oats obdurate obedience obedient obeisance obey obeyed obeying object objects oblation oblations obligation oblivion
obscure obsequies obsequious observance observe observed observing obstinate obtain obtained obtaining occasion
occasions occupation occupied ocean odds odious odour odours offence offences offend offended offender offenders
offending offends offense offer offered offereth offering offerings offers office officer officers offices officious
offspring often oftentimes ointment ointments olive oliveyards omer ominous omit once ones only onset onyx ooze open
opened openeth opening openly opens operation opinion opinions oppose opposed opposite opposition oppress oppressed
oppresseth oppressing oppression oppressor oppressors oracle oracles orange oration orator orators oratory orbs
orchard ordain ordained order ordered orderly orders ordinance ordinances ordinary ordnance organ organs orient
orisons ornament ornaments orphans ostler other others otherwise ouches ought oughtest ounce ours ourself ourselves
outcasts outer outface outgoings outlive outrage outrageous outrages outright outrun outside outward outwardly oven
over overboard overborne overcame overcome overcometh overflow overheard overlaid overlay overseer overseers
oversight overtake overthrew overthrow overthrown overtook overture overturn owed owes owest owls owner owners oxen
oyster pace paces pack packet packing pagan page pageant pageants pages paid pain pained painful pains paint painted
painter painting pair palace palaces palate palates pale palm palms palpable palsy palter paltry pangs panting paper
papers paps parable parables paradise paragon parallel paramour parcel parcels parched parchment pardon pardons
parentage parents parish park parle parley parliament parlour parlous parrot parson part partake partaker partakers
parted partial particular parties parting partition partly partner partners parts party pass passage passages passed
passengers passes passest passeth passing passion passionate passions passover past paste pastime pastors pasture
pastures patch patches pate pated path paths patience patient patiently patricians patrimony patron pattern pauca
pause paved pavement pavilion pawn paying payment pays peace peaceable peaceably peaceful peal pearl pearls peasant
peasants peck peculiar pedant peep peer peerless peers peevish pelican pelting penalty penance pence penetrate
penitence penitent penny pennyworth pense pent penury people peor perceive perceived perchance perdition peremptory
perfect perfected perfection perfectly perforce perform performed perfume perfumed perfumes perhaps peril perilous
perils period perish perished perisheth perjury permission permit pernicious perpetual perplexed perplexity
persecute persecuted persever person personal persons persuade persuaded persuading persuasion pertain pertained
pertaineth pertaining peruse perverse pervert perverted perverteth pestilence pestilent petition petitions petticoat
petty philosophy phoenix phrase phrases physic physician physicians pick picked picking picture pictures piece
pieces pied pierce pierced piercing piety pigeon pigeons pike pikes pile pilgrim pilgrimage pillage pillar pillars
pillow pillows pilot pilots pinch pinches pine pines pining pins pious pipe pipes pirate pirates pisseth pitch
pitched pitcher pitchers piteous pith pitied pities pitiful pits pity pitying place placed places plague plagued
plagues plain plainly plainness plains plaister planet planets planks plant plantain planted planteth plants plate
plates platform play played player players playfellow playing plays plea plead pleaded pleading pleasant please
pleased pleases pleaseth pleasing pleasure pleasures plebeians pledge pledges plenteous plentiful plenty pless
plight plot plots plotted plough plow plowed pluck plucked plucks plume plumes plummet plunge pocket pockets poesy
poet poetry poets point pointed points poise poison poisonous poisons pole policy politic poll polls pollute
polluted pomp pool pools poor poorer poorest poorly pope popular populous porch porridge port porter porters portion
portions portly ports possess possessed possession possible post posted posterity posts potency potent potion pots
pottage potter pottle pound pounds pour poured poureth poverty powder power powerful powers practice practices
practise practised praise praised praises praising pranks prate prating prattle pray prayed prayer prayers prayeth
praying prays preach preached preacher preaching precedent precept precepts precious precise precisely prefer
preferment preferred pregnant prelate prepare prepared presage presages presence present presented presently
presents preserve preserved preserveth presidents press pressed presses presume pretence pretend prettiest pretty
prevail prevailed prevent prevented prevention prey price prick pricket pricking pricks pride pridge priest
priesthood priests prime prince princely princes princess principal print prison prisoner prisoners prisons prithee
private privately privilege privily privy prize probable probation proceed proceeded proceedeth proceeding proceeds
process procession proclaim proclaimed proclaims procure prodigal prodigious produce profane profaned profess
professed professes profession proffer profit profitable profited profiteth profits profound progeny progress
project prologue prolong prolonged promise promised promises promising promontory promote promoted promotion prompt
prone pronounce pronounced proof proofs prop proper properly properties property prophecies prophecy prophesied
prophesy prophet prophetess prophetic prophets proportion propose prospect prosper prospered prosperity prosperous
prostrate protect protection protector protest proud prouder proudest proudly prove proved provender proverb
proverbs proves provide provided providence province provinces provision provoke provoked provokes provoking provost
prudent prunes psalm psalms psalteries psaltery public publican publicans publicly publish published pudding puffed
puissance puissant pull pulled pulls pulpit pulse punish punished punishment puny pupil puppet puppy purblind
purchase purchased pure purer purest purgation purge purged purified purify purifying purity purple purpose purposed
purposes purse purses pursue pursued pursuers pursues pursueth pursuing pursuit push puts putter puttest putteth
putting quails quaint quaintly quake qualified qualify qualities quality quantity quarrel quarrels quart quarter
quarters quean queen queens quell quench quenched quest question questions quick quicken quickened quickeneth
quickly quiet quietly quietness quill quillets quit quite quittance quiver quondam quote quoth rabble race rack
radiant rage rages ragged raging rags rail railed railing rails raiment rain rainbow rained raineth rainy raise
raised raiseth raising raisins rams rancorous rancour range ranges rank ranks ransom ransomed rape rapier rapt rare
rarely rarest rarity rascal rascally rascals rash rashness rate rated rates rather rats rattling raught raven
ravening ravenous ravens ravin ravish ravished rays raze razed razor reach reached reacheth reaching read readiness
reading reads ready realm realms reap reapers rear reared reason reasonable reasoned reasoning reasons rebel
rebelled rebellion rebellious rebels rebuke rebuked rebukes receipt receive received receives receiveth receiving
reckless reckon reckoned reckoning reckonings recompence recompense reconcile reconciled record recorded recorder
records recount recover recovered recovery recreant recreation reddish redeem redeemed redeemer redemption redoubted
redress reed reeds reek reeking reel reference refined reflection refrain refrained refresh refreshed refuge refuse
refused refuseth regal regard regarded regardeth regards regent regiment region regions register rehearse reign
reigned reigneth reigns rein reins reject rejected rejoice rejoiced rejoiceth rejoicing relate relation release
released relent relief relieve religion religious relish rely remain remainder remained remaineth remaining remains
remedies remedy remember remembered remiss remission remnant remorse remote remove removed removeth removing rend
render rendered renew renewed renown renowned rent repaid repair repaired repay repeal repeat repent repentance
repented repenteth repetition replete replied replies reply report reported reports repose reprieve reproach
reproached reproaches reprobate reproof reprove reproved repulse reputation repute reputed request requested
requests require required requires requiring requital requite requited rereward rescue rescued resemble reserve
reserved residence resides residue resign resist resisted resolute resolution resolve resolved resort resorted
respect respected respects respite rest rested resteth resting restless restore restored restrain restrained
restraint rests retain retained retire retired retirement retires retreat return returned returneth returning
returns reveal revealed revealeth revel revelation revels revenge revenged revengeful revenger revenges revenue
revenues reverence reverend reverent reverse reviled revive revived revolt revolted revolting reward rewarded
rewardeth rewards rhetoric rheum rhyme rhymes ribs rich richer riches richest richly riddle ride rider riders rides
rideth ridiculous riding right righteous rightful rightly rights rigour rime rimmon ring rings riot riotous riots
ripe rise risen rises riseth rising rite rites rival rivals rive river rivers road roar roared roaring roars roast
roasted robbed robber robbers robbery robbing robe robes robs rock rocks rocky rode rods roes rogue rogues roll
rolled rolling rolls rood roof roofs room rooms root rooted roots rope ropes rose rosemary roses rotten rottenness
rough roughly round roundly rounds rouse rout rows royal royally royalties royalty rubies rubs ruddy rude rudely
rudeness ruffian ruffle rugged ruin ruinate ruinous ruins rule ruled ruler rulers rules ruleth ruminate rumour
rumours rump rung runneth running runs rush rushes rushing rust rusty ruth ruthless sabbath sabbaths sable sack
sackcloth sacks sacrament sacred sacrifice sacrificed sacrifices saddle saddled sadly sadness safe safeguard safely
safer safest safety saffron sage said saidst sail sailed sailing sailors sails saint sainted saints saith sake sakes
sale sall salt salutation salute saluted saluteth salvation salve same sanctified sanctify sanctity sanctuary sand
sands sandy sang sans sapphire sarea satisfied satisfy sauce sauciness saucy savage save saved saves saveth saving
saviour savour savours savoury sawest saws sayest saying sayings says scab scald scale scales scall scandal scant
scanted scape scar scarce scarcely scared scarf scarfs scarlet scars scatter scattered scattereth scene scent
sceptre sceptres schedule scholar scholars school schools scold scolding sconce scope score scorn scorner scornful
scorning scorns scorpions scour scourge scourged scouts scrape scraped scraps scratch screech scribe scribes scrip
scripture scriptures scroll scruple scum scurvy scythe seal sealed seals search searched searcheth searching seas
season seasons seat seated seats second seconds secrecy secret secretary secretly secrets sect secure securely
security sedition seduce seduced seed seeds seeing seek seekest seeketh seeking seeks seem seemed seemeth seeming
seems seen seer seers sees seest seeth seethe seize seized seldom self selfsame sell seller selleth selves semblable
semblance senate senators send sendest sendeth sending sends senior sennet sense senseless senses sensible sensual
sent sentence sentences separate separated separateth separation sepulchre sepulchres sequel sequent sergeant
serious seriously serpent serpents servant servants serve served serves serveth service services servile serving
servitude session sets setter settest setteth setting settle settled seven sevenfold seventeen seventh seventy sever
several severally severe severed severity sexton shade shadow shadows shady shaft shake shakeh shaken shakes shaketh
shaking shall shallow shalt shame shamed shameful shamefully shameless shames shape shapeless shapen shapes share
sharp sharpened sharper sharply shave shaved shaven sheaf shean shear shearers shearing sheath sheathe sheaves sheba
shed shedding sheep sheet sheets shekel shekels shell shelter shemesh shent shepherd shepherds sheriff sherris shew
shewbread shewed shewest sheweth shewing shield shields shift shifts shilling shillings shin shine shined shines
shineth shining ship shipping ships shipwreck shirt shirts shittim shock shoe shoes shone shook shoot shooting
shoots shop shore shores shorn short shortened shorter shortly shot should shoulder shoulders shouldest shouldst
shout shouted shouting shouts shovels show showed shower showers showing shown shows shrew shrewd shrewdly shriek
shrieking shrift shrill shrine shrink shroud shrunk shua shun shuns shut shuts shutteth sick sicken sickle sickly
sickness side sides siege sieve sift sigh sighed sighing sighs sight sightless sights sign signal signet signified
signify signior signs silence silent silk silken silly silver similes similitude simple simpleness simples
simplicity simply since sincere sincerely sincerity sinew sinews sinful sing singer singers singing single
singleness singly sings singular sinister sink sinking sinks sinned sinner sinners sinneth sins sire sirrah sirs
sister sisterhood sisters sith sits sittest sitteth sitting situate sixpence sixteen sixth sixty size skies skilful
skill skin skins skip skipping skirmish skirt skirts skull slack slain slander slanderous slanders slaughter slave
slavery slaves slavish slay slayer slayeth slaying sleep sleepest sleepeth sleeping sleeps sleepy sleeve sleeves
slender slept slew slide slight slightly slime sling slip slippery slips sloth slothful slough slow slowly sluggard
slumber slumbers smack small smallest smart smell smelling smells smelt smile smiled smiles smiling smite smiteth
smith smiting smitten smock smoke smoking smoky smooth smote smother snail snake snakes snare snared snares snatch
snow snuff snuffers soar sober sociable society sockets sodden soever soft soften softly soil sojourn sojourned
sojourner sojourneth sola solace sold soldier soldiers sole solely solemn solemnity solemnly soles solicit solitary
solus some somebody something sometime sometimes somewhat song songs sonnet sons soon sooner soonest sooth sorcerers
sorceries sore sorely sores sorrow sorrowful sorrows sorry sort sorts sought soul souls sound sounded sounding
soundly soundness sounds sour source sourest south southward sovereign sowed sower soweth sown space spacious spade
spake spakest span spaniel spare spared sparing spark sparkling sparks sparrow sparrows speak speaker speakest
speaketh speaking speaks spear spears special specially speckled spectacle spectacles sped speech speeches
speechless speed speedily speedy spell spells spend spends spent sphere spheres spice spices spider spied spies
spill spilt spin spirit spirited spirits spiritual spit spite spits spleen split spoil spoiled spoiler spoilers
spoiling spoils spoke spoken spoon spoons sport sportive sports spot spotless spots spotted spouse spout sprang
spread spreadeth spreading spring springeth springing springs sprinkle sprinkled sprite sprites sprung spur spurn
spurs square squire stab stabbed stable stablish stabs staff stage stagger stain stained stains stairs stake stakes
stale stalk stalks stall stalls stamp stamped stamps stand standard standards standers standest standeth standing
stands star stare staring stark stars start started starting starts starve starved state stately states station
statue stature statute statutes staves stay stayed staying stays stead steads steal stealeth stealing steals stealth
stedfast stedfastly steed steeds steel steep stem step steps sterile stern steward stewards stick sticks stiff still
stillness sting stings stink stinking stint stir stirred stirreth stirring stirs stock stockings stocks stole stolen
stomach stomachs stone stoned stones stony stood stool stools stoop stooped stooping stop stopped stops store stored
storehouse stories stork storm storms stormy story stout straight strain strains strait straitened straitly
straitness strange strangely stranger strangers strangest strangle strangled stratagem stratagems straw strawed
straws stray stream streams street streets strength strengthen strengths stretch stretched stretcheth strew stricken
strict stride strife strifes strike strikes striking string strings strip stripes stripped strive strives striving
stroke strokes strong stronger strongest strongly strove struck strucken strumpet stubble stubborn stuck studied
studies study stuff stuffed stumble stumbled stumbling stump stumps stung style subdue subdued subject subjection
subjects submission submit subscribe substance substitute subtilty subtle suburbs succeed succeeding success
succession successive succour such suck sucking sucks sudden suddenly sues suffer sufferance suffered suffereth
suffering sufferings suffers suffice sufficient sugar suggest suggestion suit suited suitor suitors suits sullen
sulphurous summer summers summon summons sums sunder sundry sung sunk sunrising suns sunshine supper supplant supple
suppliant supplied supply support suppose supposed supposing suppress supremacy supreme sure surely surety surfeit
surfeited surfeiting surge surgeon surgery surly surmise surname surnamed surprise surprised surrender survey
surveyor survive suspect suspected suspects suspicion suspicious sustain sustenance swagger swaggerers swaggering
swain swallow swallowed swallowing swan sware swarest swarm swarms sway sways swear sweareth swearing swears sweat
sweating sweep sweet sweeten sweeter sweetest sweetheart sweeting sweetly sweetness sweets swell swelling swells
swept swift swifter swiftest swiftly swim swine swinged swoln swoon sword swords swore sworn sycomore syllable
sympathy synagogue synagogues synod tabernacle table tables tabor tabrets taches tackle tail tailor tailors tails
taint tainted taints take taken takes takest taketh taking tale talebearer talent talents tales talk talked talkest
talking talks tall tallow tame tanner taper tapers tapestry tapster tardy tares target targets tarried tarry
tarrying task taste tasted taught taunt taunts tavern tawny taxation taxed teach teacher teachers teaches teachest
teacheth teaching team tear teareth tears tedious teeming teen teeth tell telleth telling tells temper temperance
temperate tempest temple temples temporal tempt temptation tempted tempting tempts tenants tend tender tenderly
tenderness tendeth tending tends tenons tenour tent tenth tents teraphim term terms terrible terribly terror terrors
testament testified testifieth testify testimony testy tetrarch text than thane thank thanked thankful thankfully
thanks that theatre thee theft their theirs them theme themselves then thence there thereat thereby therefore
therein thereof thereon thereto thereunto thereupon therewith these they thick thicker thicket thief thieves
thievish thigh thighs thin thine thing things think thinkest thinketh thinking thinks third thirst thirsty thirteen
thirteenth thirtieth thirty this thistle thither thorn thorns thorny thorough thoroughly those thou though thought
thoughts thousand thousands thrall thread threat threaten threatened threatens threats three threefold threescore
threshing threshold threw thrice thrift thrifty thrive throat throats throne throned thrones throng throngs through
throughly throughout throw throwing thrown throws thrust thrusting thumb thunder thunders thus thyself tickle
tickling tide tides tidings tied tiger tigers till timber timbrel timbrels time timeless timely times timorous
tinker tire tired tires tiring tithe tithes title titles toad toads today toes together toil token tokens told
tolerable toll tomb tombs tomorrow tongs tongue tongued tongues tonight took tool tooth topaz tops torch torches
tore torment tormented torments torn torture tortures toss tossed touch touched touches toucheth touching tough
toward towards tower towers town towns toys trace tractable trade traded tradition traffic traffick tragedy tragic
tragical trail train trains traitor traitorous traitors trample trance transform transgress translate translated
transport trap trash travail travailed travaileth travel traveller travellers travelling travels treachery tread
treadeth treading treads treason treasons treasure treasures treasuries treasury treaty treble tree trees tremble
trembled trembles trembling trench trencher trenches trespass trespassed trespasses trial tribe tribes tribune
tribunes tributary tribute trick tricks tried trieth trifle trifles trifling trim trip tripping triumph triumphant
triumphing triumphs trivial trod trodden trode troop troops trophies trophy trot troth trouble troubled troubles
troubleth troublous trow truant truce trudge true truer truest truly trump trumpet trumpeters trumpets truncheon
trunk trust trusted trustest trusteth trusting trusty truth truths tumble tumbled tumult tumultuous tune tuned tunes
turf turn turned turneth turning turns turtle turtles tush tutor tutors twain twelfth twelve twentieth twenty twice
twigs twilight twin twined twins twofold tyrannous tyranny tyrant tyrants ugly unable unawares unbelief unborn
uncertain uncivil uncle unclean uncles uncover uncovered undefiled under undergo underneath understand understood
undertake undertook undo undone unequal uneven unfeigned unfit unfold unfruitful ungentle ungodly ungracious
ungrateful unhappy unholy unicorn unicorns union unite united unity universal unjust unjustly unkind unkindly
unkindness unknown unlawful unlearned unleavened unless unlike unloose unluckily unlucky unmannerly unmarried unmeet
unnatural unprovided unpunished unquiet unrest unruly unsavoury unseen unsettled unskilful unspotted unstained
unsure untainted untempered untie until untimely unto untrue unused unusual unwelcome unwilling unwise unworthy
upbraid upbraided uphold upholdeth upon upper uppermost upright uprightly uproar upside upward urge urged urging
usage used uses usest useth using usual usurer usurp usurper usurping usury utmost utter utterance uttered uttereth
utterly uttermost utters vacant vaded vagabond vail vain vainly vale valiant valiantly validity valley valleys valor
valour value valued values vanish vanished vanities vanity vanquished vantage vantages vapour vapours variable
varlet vassal vassals vast vasty vault vaward vehement vehemently veil vein veins velvet venge vengeance venison
venom venomous vent venture ventures venturous verdict verge verified verily verity verse verses very vessel vessels
vestal vesture vexation vexed vial vials viands vice vices vicious victor victories victorious victors victory
victual victuals view vigilant vigour vile vilely vilest vill village villages villain villainous villains villainy
villanous villany vine vinegar vines vineyard vineyards vintage viol violate violence violent violently violet
violets viper vipers virgin virginity virgins virtue virtues virtuous virtuously visage visible vision visions visit
visitation visited visiting visor vitae vocation voice voices void volume voluntary vomit votre vouch vouchsafe vous
vowed vows voyage vulgar vulture wafers waft wage wager wages wagging waggon wagons wail wailing waist wait waited
waiteth waiting waits wake waked wakes waking walk walked walkest walketh walking walks wall walled wallow walls
wander wandered wandereth wandering waning want wanted wanteth wanting wanton wantonness wants ward wardrobe wards
ware wares warfare warlike warm warmed warmth warn warned warning warp warrant warranted warred warrior warriors
wars wart wary wash washed washes washing wasp wast waste wasted wasteful wastes wasting watch watched watches
watchful watching watchman watchmen water watered watereth waters watery wave waved wavering waves waving waxed
waxen wayfaring ways wayward weak weaker weakest weakness weal wealth wealthy weaned weapon weapons wear wearied
weariness wearing wears weary weasel weather weaver wedded wedding wedlock weed weeds week weeks weep weeping weeps
weigh weighed weighing weighs weight weights weighty weird welcome welcomes welfare welkin well wells wench wenches
went wentest wept were wert west western westward whale what whatsoever wheat wheel wheels whelp whelps when whence
where whereas whereat whereby wherefore wherein whereof whereon whereto whereunto whereupon wherewith whet whether
which while whiles whilst whip whipped whipping whips whirlwind whirlwinds whisper whispering whispers whistle whit
white whiteness whiter whither whole wholesome wholly whom whomsoever whore whoredom whoredoms whores whoreson
whoring whose whoso whosoever wicked wickedly wickedness wide widow widower widowhood widows wield wife wight wild
wilderness wildly wildness wilful wilfully will willing willingly willow willows wills wilt wind winded winding
window windows winds windy wine winepress wing winged wings wink winking wins winter winters wipe wiped wisdom
wisdoms wise wisely wiser wisest wish wished wishes wishing wist witch witchcraft witches with withal withdraw
withdrawn withdrew wither withered withereth withheld withhold withholden within without withstand withstood witness
witnesses wits witted witty wive wives wizard wizards woeful woes wolf wolves woman womanhood womanish womb wombs
women wonder wondered wonderful wondering wonders wondrous wont wonted wood woodcock wooden woods wooed wooer wooers
woof wooing wool woollen woos word words wore work workers worketh working workman workmen works world worldly
worlds worm worms wormwood worn worse worser worship worshipful worshipped worships worst worth worthier worthiest
worthily worthiness worthless worthy would wouldest wouldst wound wounded wounding wounds woven wrack wrangle
wrangling wrap wrapped wrath wrathful wreath wreathen wreaths wreck wren wrest wrestle wrestled wrestler wrestling
wretch wretched wretches wring wringing wrinkle wrinkled wrinkles writ write writer writers writes writing written
wrong wronged wrongfully wrongs wrote wroth wrought wrung yard yards yare yarn yawn year yearly years yellow yeoman
yesterday yield yielded yielding yields yoke yokes yond yonder young younger youngest your yours yourself yourselves
youth youthful youths zeal zealous
"""

#: the words, sorted
WORDS: tuple[str, ...] = tuple(_TEXT.split())
