"""Deterministic English and Chinese texts for quantization: calibration and held-out sets.

A reduced-precision encoder is calibrated on one set of texts and judged on another.
Both come from one generator of topic sentences (cooking, databases, football, weather,
...) in two languages: keyword queries of a few tokens (where int8 errors weigh most:
mean pooling averages them over few tokens), sentences, and passages of 100-256 tokens,
so the judge sees traffic like the served one. The split is made per sentence and keyword before passages are
built, so no held-out text, nor any sentence inside a held-out passage, was ever seen
during calibration. Nothing is downloaded: the texts are generated from the word lists below.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SEED = 12

# topic -> (subjects, predicates); a sentence joins a subject and a predicate of one topic.
ENGLISH_TOPICS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "cooking": (
        ("The chef", "My grandmother", "The small bakery", "A street vendor", "The new restaurant", "Our neighbour"),
        (
            "bakes sourdough bread before sunrise",
            "slow-cooks the beef stew for six hours",
            "serves dumplings with chili oil",
            "adds too much salt to the soup",
            "grills fresh sardines on charcoal",
            "makes pasta by hand every Sunday",
        ),
    ),
    "databases": (
        ("The query planner", "Our Postgres cluster", "The nightly backup job", "A missing index", "The replica", "The migration script"),
        (
            "scans the whole orders table",
            "locks the users table for minutes",
            "falls behind the primary under heavy writes",
            "doubles the latency of every search",
            "rewrites the join into a hash join",
            "fails when the disk fills up",
        ),
    ),
    "football": (
        ("The striker", "The home team", "The young goalkeeper", "The referee", "The coach", "The visiting fans"),
        (
            "scores twice in the second half",
            "saves a penalty in extra time",
            "shows a red card after ten minutes",
            "changes the formation at half time",
            "celebrates the title in the rain",
            "loses the derby for the third year",
        ),
    ),
    "serving": (
        ("The inference server", "The dynamic batcher", "The GPU", "The tokenizer", "The load balancer", "The embedding model"),
        (
            "joins requests into batches of sixteen",
            "waits two milliseconds for more requests",
            "sits idle between small requests",
            "pads every text to the longest one",
            "sends traffic to the least busy replica",
            "returns vectors of 384 numbers",
        ),
    ),
    "weather": (
        ("A cold front", "The storm", "The morning fog", "A heat wave", "Heavy snow", "The monsoon"),
        (
            "closes the mountain roads",
            "brings thunder over the harbour",
            "delays every flight at the airport",
            "pushes temperatures above forty degrees",
            "floods the low streets near the river",
            "arrives two weeks early this year",
        ),
    ),
    "health": (
        ("The doctor", "Regular exercise", "The new vaccine", "A short nap", "The hospital", "Too much sugar"),
        (
            "lowers the risk of heart disease",
            "recommends eight hours of sleep",
            "protects older patients through the winter",
            "improves concentration in the afternoon",
            "opens a clinic for children",
            "raises blood pressure over time",
        ),
    ),
    "finance": (
        ("The central bank", "The startup", "Rising interest rates", "The stock market", "My pension fund", "The tax office"),
        (
            "raises rates by a quarter point",
            "runs out of money before the next round",
            "make mortgages more expensive",
            "falls sharply after the earnings report",
            "invests mostly in government bonds",
            "sends a letter about the late payment",
        ),
    ),
    "travel": (
        ("The night train", "Our hotel", "The ferry", "A cheap flight to Lisbon", "The tour guide", "The old town"),
        (
            "leaves Vienna at ten in the evening",
            "offers a view of the cathedral",
            "crosses the strait in forty minutes",
            "costs less than a dinner in Paris",
            "speaks four languages fluently",
            "fills with tourists every summer",
        ),
    ),
    "music": (
        ("The orchestra", "The drummer", "Her first album", "The jazz trio", "The choir", "An old vinyl record"),
        (
            "plays Beethoven's ninth symphony",
            "keeps the tempo perfectly steady",
            "sells a million copies in a month",
            "improvises for twenty minutes",
            "sings in the cathedral at Christmas",
            "crackles softly on the turntable",
        ),
    ),
    "gardening": (
        ("The tomato plants", "My neighbour's roses", "The apple tree", "A family of snails", "The compost heap", "The lawn"),
        (
            "need water every evening in July",
            "bloom twice a year",
            "drops its fruit before it ripens",
            "eats the young lettuce overnight",
            "turns kitchen scraps into soil",
            "turns brown after the dry spell",
        ),
    ),
    "space": (
        ("The telescope", "The rover", "A comet", "The space station", "The rocket", "The astronaut"),
        (
            "photographs a galaxy far beyond the Milky Way",
            "drills into the red rock of Mars",
            "passes close to the sun every 76 years",
            "orbits the earth sixteen times a day",
            "lands its booster on a ship at sea",
            "spends six months in orbit",
        ),
    ),
    "support": (
        ("The customer", "The help desk", "A password reset email", "The mobile app", "The refund", "The chat assistant"),
        (
            "cannot log in after the update",
            "answers tickets within an hour",
            "ends up in the spam folder",
            "crashes when the camera opens",
            "takes five working days to arrive",
            "escalates the complaint to a manager",
        ),
    ),
}

ENGLISH_TAILS = (
    "",
    " last week",
    " in the old town",
    " despite the rain",
    " according to the report",
    " for the first time",
    " every winter",
    " without any warning",
)
ENGLISH_FORMS = ("{s} {p}{t}.", "Is it true that {l} {p}{t}?", "{s} {p}{t}, and nobody seems surprised.", "Why {l} {p}{t}, I wonder.")

CHINESE_TOPICS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "烹饪": (
        ("厨师", "我的奶奶", "那家小面包店", "街边的小贩", "新开的餐厅", "我们的邻居"),
        ("每天清晨烤酸面包", "把牛肉炖了六个小时", "用辣椒油配饺子", "在汤里放了太多盐", "用炭火烤新鲜的沙丁鱼", "每个星期天手工做面条"),
    ),
    "数据库": (
        ("查询优化器", "我们的数据库集群", "夜间备份任务", "缺失的索引", "只读副本", "迁移脚本"),
        (
            "扫描了整张订单表",
            "把用户表锁了好几分钟",
            "在大量写入时落后于主库",
            "让每次搜索的延迟翻倍",
            "把连接改写成哈希连接",
            "在磁盘写满时失败",
        ),
    ),
    "足球": (
        ("前锋", "主队", "年轻的守门员", "裁判", "教练", "客队球迷"),
        ("在下半场梅开二度", "在加时赛扑出点球", "开场十分钟就出示红牌", "在中场休息时调整阵型", "在雨中庆祝夺冠", "连续三年输掉德比"),
    ),
    "推理服务": (
        ("推理服务器", "动态批处理器", "显卡", "分词器", "负载均衡器", "向量模型"),
        (
            "把请求合并成十六个一批",
            "等待两毫秒收集更多请求",
            "在小请求之间处于空闲",
            "把每段文本填充到最长的长度",
            "把流量发给最空闲的副本",
            "返回三百八十四维的向量",
        ),
    ),
    "天气": (
        ("冷空气", "台风", "清晨的大雾", "热浪", "大雪", "季风"),
        (
            "封闭了山区的公路",
            "给港口带来雷暴",
            "让机场的航班全部延误",
            "把气温推高到四十度以上",
            "淹没了河边的低洼街道",
            "今年提前两周到来",
        ),
    ),
    "健康": (
        ("医生", "规律的运动", "新疫苗", "短暂的午睡", "那家医院", "过多的糖分"),
        ("降低心脏病的风险", "建议每晚睡够八个小时", "在冬天保护年长的病人", "提高下午的注意力", "开设了儿童门诊", "会逐渐升高血压"),
    ),
    "金融": (
        ("中央银行", "那家创业公司", "上涨的利率", "股市", "我的养老基金", "税务局"),
        (
            "把利率上调了零点二五个百分点",
            "在下一轮融资前资金耗尽",
            "让房贷变得更贵",
            "在财报公布后大幅下跌",
            "主要投资国债",
            "寄来一封关于逾期付款的信",
        ),
    ),
    "旅行": (
        ("夜班火车", "我们的酒店", "渡轮", "飞往里斯本的廉价航班", "导游", "古城"),
        (
            "晚上十点从维也纳出发",
            "可以看到大教堂的景色",
            "四十分钟就能渡过海峡",
            "比在巴黎吃一顿晚饭还便宜",
            "能说流利的四种语言",
            "每年夏天都挤满游客",
        ),
    ),
    "音乐": (
        ("交响乐团", "鼓手", "她的第一张专辑", "爵士三重奏", "合唱团", "一张旧黑胶唱片"),
        (
            "演奏贝多芬第九交响曲",
            "把节奏控制得非常稳定",
            "一个月卖出一百万张",
            "即兴演奏了二十分钟",
            "圣诞节在教堂里演唱",
            "在唱机上轻轻地沙沙作响",
        ),
    ),
    "园艺": (
        ("番茄苗", "邻居家的玫瑰", "那棵苹果树", "一群蜗牛", "堆肥", "草坪"),
        ("七月每天傍晚都要浇水", "一年开两次花", "果子还没熟就掉了", "一夜之间吃光了生菜", "把厨余变成肥沃的土壤", "在干旱后变成了棕色"),
    ),
    "航天": (
        ("望远镜", "火星车", "一颗彗星", "空间站", "火箭", "宇航员"),
        (
            "拍到了银河系之外的星系",
            "在火星的红色岩石上钻孔",
            "每七十六年接近太阳一次",
            "每天绕地球十六圈",
            "把助推器降落在海上的船上",
            "在轨道上待了六个月",
        ),
    ),
    "客服": (
        ("那位顾客", "客服中心", "重置密码的邮件", "手机应用", "退款", "聊天助手"),
        ("更新后无法登录", "在一小时内回复工单", "被放进了垃圾邮件", "打开相机时会闪退", "需要五个工作日才能到账", "把投诉转给了经理"),
    ),
}

CHINESE_TAILS = ("", "，就在上周", "，在老城区", "，尽管下着雨", "，据报道", "，这是第一次", "，每年冬天都这样", "，没有任何预兆")
CHINESE_FORMS = ("{s}{p}{t}。", "{s}真的{p}{t}吗？", "{s}{p}{t}，大家都不觉得意外。", "听说{s}{p}{t}。")


@dataclass(frozen=True)
class TextSets:
    """Texts for one quantization run; `calibration` and `held_out` share no text and no sentence."""

    calibration: tuple[str, ...]
    held_out: tuple[str, ...]
    held_out_languages: tuple[str, ...]  # "english" or "chinese", one per held-out text


def _sentences(topics: dict, tails: tuple[str, ...], forms: tuple[str, ...]) -> list[tuple[str, str]]:
    """Every (topic, sentence) the word lists allow."""
    result = []
    for topic, (subjects, predicates) in topics.items():
        for subject in subjects:
            for predicate in predicates:
                for tail in tails:
                    for form in forms:
                        lowered = subject[0].lower() + subject[1:]  # no subject starts with a proper noun
                        result.append((topic, form.format(s=subject, l=lowered, p=predicate, t=tail)))
    return result


def _keywords(topics: dict) -> list[tuple[str, str]]:
    """Keyword queries: each topic's name, subjects and predicates on their own."""
    return [(topic, text) for topic, (subjects, predicates) in topics.items() for text in (topic, *subjects, *predicates)]


def _passage(rng: random.Random, sentences: list[str], separator: str, count: int) -> str:
    return separator.join(rng.sample(sentences, count))


def _language_texts(
    rng: random.Random,
    pool: list[tuple[str, str]],
    keywords: list[tuple[str, str]],
    count: int,
    separator: str,
    per_passage: tuple[int, int],
    passage_share: float,
    keyword_share: float,
) -> list[str]:
    """`count` unique texts: passages of one topic's sentences, keyword queries, then sentences."""
    by_topic: dict[str, list[str]] = {}
    for topic, sentence in pool:
        by_topic.setdefault(topic, []).append(sentence)
    topics = sorted(by_topic)
    passages, queries = round(count * passage_share), round(count * keyword_share)
    texts: list[str] = []
    seen: set[str] = set()
    while len(texts) < count:
        topic = topics[len(texts) % len(topics)]
        if len(texts) < passages:
            text = _passage(rng, by_topic[topic], separator, rng.randint(*per_passage))
        elif len(texts) < passages + queries:
            text = rng.choice(keywords)[1]
        else:
            text = rng.choice(by_topic[topic])
        if text not in seen:
            seen.add(text)
            texts.append(text)
    return texts


def text_sets(
    calibration: int = 96, held_out: int = 320, passage_share: float = 0.3, keyword_share: float = 0.2, seed: int = SEED
) -> TextSets:
    """Half English, half Chinese in each set; `passage_share` of each are 100-256-token
    passages, `keyword_share` keyword queries of 1-10 tokens, the rest single sentences."""
    rng = random.Random(seed)
    halves: dict[str, list[str]] = {"calibration": [], "held_out": []}
    languages: list[str] = []
    sources = (
        ("english", _sentences(ENGLISH_TOPICS, ENGLISH_TAILS, ENGLISH_FORMS), _keywords(ENGLISH_TOPICS), " ", (6, 12)),
        ("chinese", _sentences(CHINESE_TOPICS, CHINESE_TAILS, CHINESE_FORMS), _keywords(CHINESE_TOPICS), "", (5, 10)),
    )
    for language, pool, keywords, separator, per_passage in sources:
        rng.shuffle(pool)
        rng.shuffle(keywords)
        split, keyword_split = len(pool) // 4, len(keywords) // 4  # a quarter for calibration, the rest held out
        parts = {
            "calibration": (pool[:split], keywords[:keyword_split], calibration),
            "held_out": (pool[split:], keywords[keyword_split:], held_out),
        }
        for name, (sentences, words, total) in parts.items():
            halves[name] += _language_texts(rng, sentences, words, total // 2, separator, per_passage, passage_share, keyword_share)
        languages += [language] * (held_out // 2)
    sets = TextSets(tuple(halves["calibration"]), tuple(halves["held_out"]), tuple(languages))
    overlap = set(sets.calibration) & set(sets.held_out)
    if overlap:  # cannot happen with disjoint sentence pools; a guard against future edits
        raise AssertionError(f"calibration and held-out texts overlap: {sorted(overlap)[:3]}")
    return sets
