Bbn1.biasJ LªÎ:°dÒ:ü» â
¹(M¿:s_„ºŸ3:XW¯º