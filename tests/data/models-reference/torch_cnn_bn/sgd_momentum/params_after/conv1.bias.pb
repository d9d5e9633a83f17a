B
conv1.biasJ º%>àg>ðƒ”>Â––>PÜ‡=¦h”¾h3û<;ŠU¾