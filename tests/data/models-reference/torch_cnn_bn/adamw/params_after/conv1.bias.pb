B
conv1.biasJ Ö²ô=bo>8Lž>?À£>š®$=kÊŸ¾2ˆ=¬e¾