B
conv1.biasJ BXй=ћ‡>P0њ>i¶›>Ф,R=Д‹”ѕох=1[ѕ